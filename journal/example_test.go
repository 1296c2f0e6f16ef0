// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// An engine's run: a handshake, a unit of work that records its spend and its event in one
// transaction, the relay projecting both into the journal, and the journal verified.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)

	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	const run = "run-1"
	relay, err := outbox.NewRelay(s, j, run)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil { // what earlier runs left behind
		log.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
		log.Fatal(err)
	}
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS spend (unit TEXT, cents INTEGER)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO spend VALUES ('u1', 250)`); err != nil {
			return err
		}
		_, err := s.EnqueueTx(ctx, tx, run, journal.Builder(run, "spend", map[string]any{"unit": "u1", "amount": 250}))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		log.Fatal(err)
	}

	f, _ := os.Open(filepath.Join(dir, "journal.jsonl"))
	defer f.Close()
	rep, err := journal.Verify(f)
	fmt.Println(rep.Runs[run].Last, rep.Lines, err)
	// Output: 2 2 <nil>
}
