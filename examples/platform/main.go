// SPDX-License-Identifier: Apache-2.0

// Command platform is a complete platform to copy: it applies the engine's events (../engine)
// exactly once into a database of its own, from the journal directory (inbox.FollowJournal, which
// registers the platform's position with the journal as a reader, so that retention keeps what it
// has not applied) or from a NATS JetStream stream (jetstream.FollowStream), until SIGTERM or SIGINT.
//
// It shows what every platform does: inbox.Open on its own database (never the engine's book); its
// own tables, created in Inbox.WriteTx; an inbox.Router with one inbox.Decode handler per event type,
// each writing in the inbox's transaction, so that a line's effects, the run's high-water mark and
// the source's position commit together; and a clean stop: the signal ends the follow, which
// returns once what it applied is committed, then Inbox.Close. A crash at any moment costs
// nothing: the next start goes on from the position committed with the effects, and a line read
// again is a duplicate, never applied twice.
//
// Usage:
//
//	platform -db platform.db -journal journal
//	platform -db platform.db -nats nats://127.0.0.1:4222 -stream EVENTS
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

// OrderPlaced and CustomerJoined are the data of the engine's events, as this platform reads them:
// members it does not declare are ignored, so the engine may add some first.
type OrderPlaced struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

type CustomerJoined struct {
	Customer string `json:"customer"`
}

// RunStarted is the data of a run's handshake (journal.Handshake), its first line.
type RunStarted struct {
	PID int `json:"pid"`
}

// The platform's tables. events has no key on (run, seq) on purpose: the inbox alone keeps each line
// applied once, and a line applied twice would show as a second row.
const schema = `
CREATE TABLE IF NOT EXISTS events (run TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (run TEXT PRIMARY KEY, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS orders (run TEXT NOT NULL, seq INTEGER NOT NULL, customer TEXT NOT NULL, cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS customers (id TEXT PRIMARY KEY);`

func main() {
	db := flag.String("db", "platform.db", "the platform's own SQLite database, which holds its inbox")
	journalPath := flag.String("journal", "journal", "the journal directory to follow (without -nats)")
	natsURL := flag.String("nats", "", "follow a JetStream stream on this NATS server instead of the journal")
	stream := flag.String("stream", "EVENTS", "the JetStream stream (with -nats)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("platform: ")

	if err := run(*db, *journalPath, *natsURL, *stream); err != nil {
		log.Fatal(err)
	}
}

func run(db, journalPath, natsURL, stream string) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	in, err := inbox.Open(ctx, db)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, schema)
		return err
	}); err != nil {
		return err
	}
	r := router()

	log.Printf("following")
	if natsURL == "" {
		err = in.FollowJournal(ctx, journalPath, r.Route)
		var gap *inbox.JournalGapError
		if errors.As(err, &gap) {
			// Retention deleted lines this platform had not applied (a cap, or a reader that was
			// not registered): an operator decides (outbox inbox accept-retention-gap), never a silent skip.
			log.Printf("journal %s: bytes %d to %d are gone", gap.Dir, max(gap.Position, 0), gap.First-1)
		}
	} else {
		err = followStream(ctx, in, r, natsURL, stream)
	}
	// A follow returns ctx's error once the signal ended it, with everything it applied committed:
	// that is the clean stop, not a failure.
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		log.Printf("stopped")
		return nil
	}
	return err
}

// router is the platform's handlers, one per event type. Each runs inside the inbox's transaction
// for its line; an error stops the follow with nothing of that line committed (inbox.WithRetry
// would retry it and then quarantine its run alone).
func router() *inbox.Router {
	r := inbox.NewRouter() // a type without a handler stops the follow: a consumer older than its engine
	r.Handle("run_started", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v RunStarted) error {
		return record(ctx, tx, ev, "run_started",
			`INSERT INTO runs (run, pid) VALUES (?, ?)`, ev.RunID, v.PID)
	}))
	r.Handle("order_placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v OrderPlaced) error {
		return record(ctx, tx, ev, "order_placed",
			`INSERT INTO orders (run, seq, customer, cents) VALUES (?, ?, ?, ?)`, ev.RunID, ev.Seq, v.Customer, v.Cents)
	}))
	r.Handle("customer_joined", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v CustomerJoined) error {
		return record(ctx, tx, ev, "customer_joined",
			`INSERT INTO customers (id) VALUES (?)`, v.Customer)
	}))
	return r
}

// record writes a line's row in events and its own effect.
func record(ctx context.Context, tx *sql.Tx, ev inbox.Event, typ, query string, args ...any) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO events (run, seq, type) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, typ); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, query, args...)
	return err
}

// followStream applies the stream until ctx ends. The inbox keeps the stream position with the
// effects; the ordered consumer it reads with is the call's own, and nothing the server keeps
// is trusted.
func followStream(ctx context.Context, in *inbox.Inbox, r *inbox.Router, url, stream string) error {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	err = jetstream.FollowStream(ctx, js, stream, in, r.Route)
	var gap *jetstream.RetentionGapError
	if errors.As(err, &gap) {
		// The stream no longer holds what follows the position: an operator decides, and applies
		// once with jetstream.WithAcceptRetentionGap() to read on past it.
		log.Printf("stream %s: messages %d to %d are gone", gap.Stream, gap.Position+1, gap.FirstSeq-1)
	}
	return err
}
