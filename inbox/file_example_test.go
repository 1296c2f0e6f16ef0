// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func ExampleInbox_ApplyFile() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "journal.jsonl")

	// The engine's side: lines appended to the journal (by a relay, in an engine).
	j, _ := journal.OpenFile(path)
	defer j.Close()
	appendLines := func(from, to int64) {
		var lines []outbox.EventLine
		for seq := from; seq <= to; seq++ {
			lines = append(lines, outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":"r1","seq":%d}`, seq)})
		}
		j.Append(ctx, "r1", lines)
	}
	appendLines(1, 3)

	// The platform's side.
	in, err := inbox.Open(ctx, filepath.Join(dir, "platform.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()
	count := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error { return nil }
	rep, _ := in.ApplyFile(ctx, path, count)
	fmt.Printf("%+v\n", rep)
	// The next call goes on from the position stored with the effects.
	appendLines(4, 5)
	rep, _ = in.ApplyFile(ctx, path, count)
	fmt.Printf("%+v\n", rep)
	srcs, _ := in.Sources(ctx)
	pos, _ := inbox.ParseFilePosition(srcs[0].Position)
	fmt.Println(srcs[0].Name == "file:"+path, pos.Offset)
	// Output:
	// {Applied:3 Duplicates:0 Stale:0 Quarantined:0}
	// {Applied:2 Duplicates:0 Stale:0 Quarantined:0}
	// true 155
}
