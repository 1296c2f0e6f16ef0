// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/inbox"
)

func ExampleInbox_Apply() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	in, err := inbox.Open(ctx, filepath.Join(dir, "platform.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()
	// The consumer's own tables, in the same database.
	in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE seen (run TEXT, seq INTEGER, PRIMARY KEY (run, seq))`)
		return err
	})
	apply := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO seen (run, seq) VALUES (?, ?)`, ev.RunID, ev.Seq)
		return err
	}
	lines := [][]byte{
		[]byte(`{"engine_run_id":"r1","seq":1,"type":"run_started"}`),
		[]byte(`{"engine_run_id":"r1","seq":2,"type":"spend","cents":500}`),
	}
	rep, _ := in.Apply(ctx, lines, apply)
	fmt.Printf("%+v\n", rep)
	// A relay re-delivers after a crash: the same bytes are duplicates; a line past a missing one
	// parks its run.
	rep, _ = in.Apply(ctx, append(lines, []byte(`{"engine_run_id":"r1","seq":4}`)), apply)
	fmt.Printf("%+v\n", rep)
	qs, _ := in.Quarantined(ctx)
	fmt.Println(qs[0].RunID, qs[0].Reason, qs[0].Expected, qs[0].Got)
	// Output:
	// {Applied:2 Duplicates:0 Stale:0 Quarantined:0}
	// {Applied:0 Duplicates:2 Stale:0 Quarantined:1}
	// r1 gap 3 4
}
