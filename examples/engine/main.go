// SPDX-License-Identifier: Apache-2.0

// Command engine is a complete engine to copy: it keeps its own state (orders) in the book, the
// SQLite database the outbox lives in, enqueues an event in the same transaction as each change,
// and runs a relay beside that work to project the events to a journal (a directory of segments)
// or to a NATS JetStream stream, where the platform (../platform) reads them.
//
// It shows, in order, what every engine does:
//
//  1. outbox.Open: the book, created and migrated, its writer lock taken;
//  2. Relay.Recover: what earlier starts of the engine committed and never projected goes out
//     first, so that a crash loses nothing;
//  3. the handshake, journal.Handshake as the run's first line (seq 1): a run is one start of the
//     engine, named by a fresh run id, and the reader keys every line by (run, seq);
//  4. Relay.Run in a goroutine, projecting each commit promptly;
//  5. the engine's own work: Store.WriteTx with EnqueueTx (journal.Event) for every order, and
//     EnqueueOnceTx for an announcement made once for the life of the book, whatever the runs;
//  6. on SIGTERM or SIGINT (signal.NotifyContext): stop producing, Relay.Flush (everything
//     committed is in the sink), stop the relay, Store.Close, then close the sink.
//
// Usage:
//
//	engine -book book.db -journal journal
//	engine -book book.db -nats nats://127.0.0.1:4222 -stream EVENTS
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// OrderPlaced is the data of an "order_placed" event; the platform decodes the same shape.
type OrderPlaced struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// CustomerJoined is the data of a "customer_joined" event, announced once per customer for the life
// of the book.
type CustomerJoined struct {
	Customer string `json:"customer"`
}

// The engine's own tables, in the book beside the outbox's. An engine with a schema that changes
// migrates them with its own migrations and version table, never the outbox's.
const schema = `
CREATE TABLE IF NOT EXISTS orders (
	run      TEXT NOT NULL,
	seq      INTEGER NOT NULL,
	customer TEXT NOT NULL,
	cents    INTEGER NOT NULL,
	PRIMARY KEY (run, seq)
);
CREATE TABLE IF NOT EXISTS customers (id TEXT PRIMARY KEY);`

func main() {
	book := flag.String("book", "book.db", "the book: the engine's SQLite database, which holds the outbox")
	journalPath := flag.String("journal", "journal", "the journal directory the relay appends to (without -nats)")
	natsURL := flag.String("nats", "", "project to a JetStream stream on this NATS server instead of the journal")
	stream := flag.String("stream", "EVENTS", "the JetStream stream (with -nats); created when missing")
	pace := flag.Duration("pace", 20*time.Millisecond, "the pause between two orders")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("engine: ")

	if err := run(*book, *journalPath, *natsURL, *stream, *pace); err != nil {
		log.Fatal(err)
	}
}

func run(book, journalPath, natsURL, stream string, pace time.Duration) (err error) {
	// The signal ends ctx: the engine stops producing. The flush and the relay do not derive from
	// it, so that they outlive it as long as the shutdown needs them.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// A signal during the start (a long Recover, say) ends it: nothing of this run is enqueued yet,
	// and what earlier runs left waits for the next start's Recover.
	startFailed := func(err error) error {
		if ctx.Err() != nil {
			log.Printf("stopped before the run began")
			return nil
		}
		return err
	}

	sink, closeSink, err := openSink(ctx, journalPath, natsURL, stream)
	if err != nil {
		return startFailed(err)
	}
	// Deferred calls run last first: the sink is closed after the store.
	defer func() { err = errors.Join(err, closeSink()) }()
	s, err := outbox.Open(ctx, book, outbox.WithLineCheck(journal.CheckLine))
	if err != nil {
		return startFailed(err)
	}
	defer func() { err = errors.Join(err, s.Close()) }()

	// A run id names one start of the engine and is never used again: the reader keys each line by
	// (run, seq), and a restart's seqs start at 1 under its new run id.
	runID := newRunID()
	relay, err := outbox.NewRelay(s, sink, runID)
	if err != nil {
		return err
	}
	// Before the run writes its first event: earlier runs' lines reach the sink, and their once
	// keys the ledger, so that an announcement they made is not made again.
	if err := relay.Recover(ctx); err != nil {
		if ctx.Err() != nil {
			return startFailed(err)
		}
		// Every earlier run that could be projected is; the error names the others (a line the sink
		// refused). This engine starts anyway; `outbox stats` shows those runs as stopped.
		log.Printf("recover: %v", err)
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, schema)
		return err
	}); err != nil {
		return startFailed(err)
	}
	// The handshake is the run's first line, seq 1, type run_started: it fails if the run id was
	// used before, instead of continuing another run's numbers. From here on the shutdown below
	// runs whatever happens, so that the handshake is projected too.
	if _, err := s.EnqueueEvent(ctx, runID, journal.Handshake(runID, map[string]any{"pid": os.Getpid()})); err != nil {
		return startFailed(err)
	}

	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	relayDone := make(chan error, 1)
	// produce ends when the signal comes or when the relay stops on its own: an engine should not
	// go on enqueueing into a run that nothing projects.
	produce, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	go func() {
		err := relay.Run(relayCtx)
		if relayCtx.Err() == nil {
			stopProducing()
		}
		relayDone <- err
	}()
	log.Printf("running: run %s", runID)

	workErr := work(produce, s, runID, pace)
	// A second signal now ends the process at once: the book loses nothing of what it committed,
	// and the next start's Recover projects what this one could not.
	stop()

	// Shutdown, in this order. Producing has stopped (above). Flush projects every line committed
	// so far, with a context of its own: ctx may have ended already.
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), time.Minute)
	defer cancelFlush()
	flushErr := relay.Flush(flushCtx)
	// Then the relay stops; Close (deferred) waits for a batch it has in flight to be recorded.
	stopRelay()
	if err := <-relayDone; !errors.Is(err, context.Canceled) {
		return errors.Join(fmt.Errorf("relay: %w", err), workErr, flushErr)
	}
	if err := errors.Join(workErr, flushErr); err != nil {
		return err
	}
	log.Printf("stopped: run %s projected", runID)
	return nil
}

// work places an order every pace until ctx ends. Each order is one transaction: the order's row,
// its event, and the first order of a customer the customer's row and its announcement, all
// committed together or not at all.
func work(ctx context.Context, s *outbox.Store, runID string, pace time.Duration) error {
	customers := []string{"ada", "grace", "edsger", "barbara", "ken"}
	for n := int64(0); ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pace):
		}
		o := OrderPlaced{Customer: customers[n%int64(len(customers))], Cents: n%1000 + 1}
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			// Announced once for the life of the book, across runs: the key is refused while it
			// is pending or once it is in the ledger, so no restart announces a customer twice.
			joined, _, err := s.EnqueueOnceTx(ctx, tx, runID, "customer_joined:"+o.Customer,
				journal.Event("customer_joined", CustomerJoined{Customer: o.Customer}))
			if err != nil {
				return err
			}
			if joined {
				if _, err := tx.ExecContext(ctx, `INSERT INTO customers (id) VALUES (?)`, o.Customer); err != nil {
					return err
				}
			}
			// The order is known by its event's key: the platform gets the same (run, seq).
			seq, err := s.EnqueueTx(ctx, tx, runID, journal.Event("order_placed", o))
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO orders (run, seq, customer, cents) VALUES (?, ?, ?, ?)`, runID, seq, o.Customer, o.Cents)
			return err
		})
		if ctx.Err() != nil {
			// Stopped: the last order committed whole with its events, or rolled back whole if
			// the signal came during its transaction.
			return nil
		}
		if err != nil {
			return fmt.Errorf("order %d: %w", n, err)
		}
	}
}

// openSink opens what the relay projects to: the journal directory, or a JetStream stream.
func openSink(ctx context.Context, journalPath, natsURL, stream string) (outbox.Sink, func() error, error) {
	if natsURL == "" {
		// Segments of the default size (128 MiB). Retention deletes a sealed segment once every
		// registered reader has read it (the platform's inbox registers itself as it follows) and
		// it was sealed a week ago; journal.WithMaxBytes would add a cap that wins over readers.
		j, err := journal.Open(journalPath, journal.WithKeep(7*24*time.Hour))
		if err != nil {
			return nil, nil, err
		}
		return j, j.Close, nil
	}
	// A connection that rides out a server restart: the relay keeps the lines and retries.
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, err
	}
	closeConn := func() error { nc.Close(); return nil }
	js, err := njs.New(nc)
	if err != nil {
		return nil, nil, errors.Join(err, closeConn())
	}
	// Deployments usually create the stream beforehand (`outbox stream create`); this changes
	// nothing on a stream that has the sink's settings.
	if _, err := jetstream.CreateStream(ctx, js, stream); err != nil {
		return nil, nil, errors.Join(err, closeConn())
	}
	sink, err := jetstream.NewSink(js, stream)
	if err != nil {
		return nil, nil, errors.Join(err, closeConn())
	}
	return sink, closeConn, nil
}

func newRunID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}
