// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// A platform following a journal directory until it is told to stop (in a program:
// signal.NotifyContext). Each line's effects commit with the inbox's record of it and the journal
// position; after each commit the inbox registers that position with the journal as a reader, so
// that retention deletes no segment the platform has not applied.
func ExampleInbox_FollowJournal() {
	tmp, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "journal")

	// The engine's side: a relay appends lines to the journal as they commit. Small segments here,
	// so that three lines take two; retention deletes a sealed segment once every registered
	// reader has read it.
	j, err := journal.Open(dir, journal.WithSegmentSize(150), journal.WithKeep(0))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	appendSpend := func(seq, cents int64) {
		line := fmt.Appendf(nil, `{"engine_run_id":"r1","seq":%d,"type":"spend","data":{"cents":%d}}`, seq, cents)
		if err := j.Append(context.Background(), "r1", []outbox.EventLine{{Seq: seq, Line: line}}); err != nil {
			log.Fatal(err)
		}
	}

	// The platform's side.
	ctx, stop := context.WithCancel(context.Background())
	in, err := inbox.Open(ctx, filepath.Join(tmp, "platform.db"), inbox.WithReaderName("platform"))
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE spend (run TEXT, seq INTEGER, cents INTEGER)`)
		return err
	}); err != nil {
		log.Fatal(err)
	}
	type Spend struct {
		Cents int64 `json:"cents"`
	}
	r := inbox.NewRouter()
	r.Handle("spend", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v Spend) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO spend (run, seq, cents) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, v.Cents)
		return err
	}))
	followed := make(chan error, 1)
	go func() { followed <- in.FollowJournal(ctx, dir, r.Route) }()
	// FollowJournal registers the reader as it starts; retention keeps nothing for a reader not yet
	// registered, so the engine's first lines wait for it here (a platform deployed before its
	// engine, or registered with journal.SetReader, needs no such wait).
	for registered := false; !registered; time.Sleep(10 * time.Millisecond) {
		readers, _ := journal.Readers(dir)
		registered = len(readers) == 1
	}

	// Lines appended while the platform follows are applied as they come.
	for seq := int64(1); seq <= 3; seq++ {
		appendSpend(seq, 100*seq)
	}
	for pos := int64(0); pos < 3; pos, _ = in.Position(context.Background(), "r1") {
		time.Sleep(10 * time.Millisecond)
	}

	// Stopping: FollowJournal returns the context's error, with everything it applied committed.
	stop()
	fmt.Println(errors.Is(<-followed, context.Canceled))

	var total int64
	if err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		return tx.QueryRowContext(context.Background(), `SELECT sum(cents) FROM spend`).Scan(&total)
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(total)

	// The platform is registered at the journal's end.
	st, err := journal.Status(context.Background(), dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, rd := range st.Readers {
		fmt.Println(rd.Name, rd.Position == st.End)
	}
	// Output:
	// true
	// 600
	// platform true
}
