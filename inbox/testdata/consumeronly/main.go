// SPDX-License-Identifier: Apache-2.0

// Command consumeronly is a platform that only reads what an engine projected: it applies a journal
// directory or a single journal file into an inbox, checks the journal, and reports where it
// stands. TestAConsumerOnlyProgramLinksNoneOfTheEnginesRelayOrStore builds it and reads its symbols:
// reading must not drag the engine's store and relay into a consumer's binary.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

type placed struct {
	Cents int64 `json:"cents"`
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: consumeronly DB JOURNALDIR JOURNALFILE")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dbPath, dir, file string) error {
	in, err := inbox.Open(ctx, dbPath, inbox.WithReaderName("consumeronly"))
	if err != nil {
		return err
	}
	defer in.Close()
	r := inbox.NewRouter()
	r.Handle("order.placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v placed) error {
		_, err := tx.ExecContext(ctx, `SELECT ?`, v.Cents)
		return err
	}))
	if _, err := in.ApplyJournal(ctx, dir, r.Route); err != nil {
		return err
	}
	if _, err := in.ApplyFile(ctx, file, r.Route); err != nil {
		return err
	}
	srcs, err := in.Sources(ctx)
	if err != nil {
		return err
	}
	for _, s := range srcs {
		if p, err := inbox.ParseJournalPosition(s.Position); err == nil {
			fmt.Println(s.Name, p.Position)
		}
	}
	readers, err := journal.Readers(dir)
	if err != nil {
		return err
	}
	kept, err := journal.Retained(dir)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	fmt.Println(len(readers), kept, rep)
	return err
}
