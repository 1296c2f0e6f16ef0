// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

type SpendRecorded struct {
	Unit  string `json:"unit"`
	Cents int64  `json:"cents"`
}

// Opening the book: the database is created and migrated, and the writer lock taken, so that a
// second Open of the same file, here or in another process, fails at once.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "book.db")

	// The line check refuses, at the enqueue, a line the journal would refuse.
	s, err := outbox.Open(ctx, path, outbox.WithLineCheck(journal.CheckLine))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	_, err = outbox.Open(ctx, path)
	fmt.Println(errors.Is(err, outbox.ErrLocked))
	// Output: true
}

// The engine's own write and its event in one transaction: both commit, or neither. The run id is
// named once, in the enqueue; journal.Event renders the line for the seq the store gives it.
func ExampleStore_WriteTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"), outbox.WithLineCheck(journal.CheckLine))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	const run = "run-1"

	// The engine's tables live in the book, so that one transaction covers them and the event.
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE spend (unit TEXT PRIMARY KEY, cents INTEGER NOT NULL)`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	record := func(v SpendRecorded) error {
		return s.WriteTx(ctx, func(tx *sql.Tx) error {
			seq, err := s.EnqueueTx(ctx, tx, run, journal.Event("spend", v))
			if err != nil {
				return err
			}
			fmt.Println("enqueued seq", seq)
			_, err = tx.ExecContext(ctx, `INSERT INTO spend (unit, cents) VALUES (?, ?)`, v.Unit, v.Cents)
			return err
		})
	}
	if err := record(SpendRecorded{Unit: "u1", Cents: 250}); err != nil {
		log.Fatal(err)
	}
	// The unit's row exists: the insert fails, and the transaction rolls back with its event, whose
	// seq the next event is given: no hole in the run.
	fmt.Println(record(SpendRecorded{Unit: "u1", Cents: 99}) != nil)
	if err := record(SpendRecorded{Unit: "u2", Cents: 100}); err != nil {
		log.Fatal(err)
	}

	lines, err := s.PendingEvents(ctx, run, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(lines), "lines pending")
	// Output:
	// enqueued seq 1
	// enqueued seq 2
	// true
	// enqueued seq 2
	// 2 lines pending
}

// An announcement made once for the life of the book, in the same transaction as the state change
// it announces: a later run, after a restart, finds its key taken and announces nothing.
func ExampleStore_EnqueueOnceTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	finish := func(run, unit string) {
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS done (unit TEXT PRIMARY KEY)`); err != nil {
				return err
			}
			announcing, seq, err := s.EnqueueOnceTx(ctx, tx, run, "unit_done:"+unit,
				journal.Event("unit_done", map[string]string{"unit": unit}))
			if err != nil || !announcing {
				fmt.Printf("%s: %s was announced before\n", run, unit)
				return err
			}
			fmt.Printf("%s: %s announced at seq %d\n", run, unit, seq)
			_, err = tx.ExecContext(ctx, `INSERT INTO done (unit) VALUES (?)`, unit)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	finish("run-1", "u1")
	finish("run-2", "u1") // a later start of the engine, the same unit
	finish("run-2", "u2")
	// Output:
	// run-1: u1 announced at seq 1
	// run-2: u1 was announced before
	// run-2: u2 announced at seq 1
}

// The relay beside the engine's work: Run projects each commit to the journal until its context
// ends. At shutdown the engine stops producing, flushes, and only then stops the relay and closes
// the store, so that nothing committed is left unprojected.
func ExampleRelay_Run() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"), outbox.WithLineCheck(journal.CheckLine))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close() // after the store's Close: deferred calls run last first

	const run = "run-1"
	relay, err := outbox.NewRelay(s, j, run)
	if err != nil {
		log.Fatal(err)
	}
	// Earlier runs' lines first, then the run's handshake as its seq 1.
	if err := relay.Recover(ctx); err != nil {
		log.Print(err)
	}
	if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
		log.Fatal(err)
	}
	relayCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()

	// The engine's work.
	for unit := range 3 {
		if _, err := s.EnqueueEvent(ctx, run, journal.Event("spend", SpendRecorded{Unit: fmt.Sprint(unit), Cents: 10})); err != nil {
			log.Fatal(err)
		}
	}

	// Shutdown: everything committed so far reaches the journal, then the relay stops.
	if err := relay.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	stopRelay()
	fmt.Println(<-relayDone)

	f, err := os.Open(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	fmt.Printf("%d lines, %d runs, %v\n", rep.Lines, len(rep.Runs), err)
	// Output:
	// context canceled
	// 4 lines, 1 runs, <nil>
}
