// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
)

// A context that ends inside a batch costs that batch alone: the batches before it are committed with
// their position, the call returns the context's error (FollowFile: ctx.Err() itself), and the next
// call goes on from there.
func TestAContextEndingMidCallKeepsTheBatchesBeforeIt(t *testing.T) {
	for _, follow := range []bool{false, true} {
		rj := newRelayJournal(t, journalPath(t))
		rj.add("a", 8)
		c := newConsumer(t, WithBatchLines(2))
		ctx, cancel := context.WithCancel(context.Background())
		h := func(hctx context.Context, tx *sql.Tx, ev Event) error {
			if ev.Seq == 5 {
				cancel()
			}
			return record(hctx, tx, ev)
		}
		var err error
		var rep Report
		if follow {
			err = c.in.FollowFile(ctx, rj.path, h)
		} else {
			rep, err = c.in.ApplyFile(ctx, rj.path, h)
		}
		if !errors.Is(err, context.Canceled) || (follow && err != context.Canceled) {
			t.Fatalf("follow %v: %v, want context.Canceled", follow, err)
		}
		if !follow && rep != (Report{Applied: 4}) {
			t.Fatalf("report %+v", rep)
		}
		wantApplied(t, c.applied(), map[string]int64{"a": 4})
		if rep := c.applyFile(rj.path); rep != (Report{Applied: 4}) {
			t.Fatalf("follow %v: the next call: %+v", follow, rep)
		}
	}
}

// A handler's panic reaches the caller as a panic, with the batches before it committed and the
// inbox usable.
func TestAHandlersPanicLeavesTheBatchesBeforeItAndTheInboxUsable(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	c := newConsumer(t, WithBatchLines(2))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		c.in.ApplyFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
			if ev.Seq == 3 {
				panic("boom")
			}
			return record(ctx, tx, ev)
		})
	}()
	wantApplied(t, c.applied(), map[string]int64{"a": 2})
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 4}) {
		t.Fatalf("after the panic: %+v", rep)
	}
}

// The stored position moved under a running call (here rewound, as Release does, between two
// batches): the call gets ErrSourceMoved from ApplyFrom, reads the position again, reads the file
// again from its start, and applies each line once.
func TestAPositionMovedUnderARunningCallIsReadAgain(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	c := newConsumer(t, WithBatchLines(2))
	moved := false
	afterFileCommit = func(source string, to FilePosition) {
		if !moved {
			moved = true
			if _, err := c.in.ApplyFrom(context.Background(), source, to.encode(), nil, nil, record); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { afterFileCommit = nil }()
	rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
	if err != nil || rep != (Report{Applied: 6, Duplicates: 2}) {
		t.Fatalf("%+v, %v; want the first batch read again as duplicates", rep, err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 6})
}

// Bad arguments are refused before anything is read or stored.
func TestApplyFileRefusesBadArguments(t *testing.T) {
	c := newConsumer(t)
	for _, tc := range []struct {
		path string
		h    Handler
	}{{"", record}, {journalPath(t), nil}, {"/tmp/a\x01b", record}, {"/tmp/\xff", record}} {
		if _, err := c.in.ApplyFile(context.Background(), tc.path, tc.h); err == nil {
			t.Errorf("ApplyFile(%q, handler %v) took it", tc.path, tc.h != nil)
		}
		if err := c.in.FollowFile(context.Background(), tc.path, tc.h); err == nil {
			t.Errorf("FollowFile(%q, handler %v) took it", tc.path, tc.h != nil)
		}
	}
	if srcs, _ := c.in.Sources(context.Background()); len(srcs) != 0 {
		t.Fatalf("sources stored: %+v", srcs)
	}
}

// The journal cut and written again past the position between two batches of one call: the next
// batch finds the line at the position gone and reads the file again from its start, skipping none
// of the new lines.
func TestAJournalRewrittenBetweenTwoBatchesIsReadAgainFromItsStart(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	rj.j.Close()
	var b []byte
	for seq := 1; seq <= 40; seq++ {
		b = fmt.Appendf(b, "{\"engine_run_id\":\"b\",\"seq\":%d}\n", seq)
	}
	c := newConsumer(t, WithBatchLines(2))
	done := false
	afterFileCommit = func(string, FilePosition) {
		if !done {
			done = true
			rewrite(t, rj.path, b)
		}
	}
	defer func() { afterFileCommit = nil }()
	rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
	if err != nil {
		t.Fatal(err)
	}
	got := c.applied()
	if got["a"] != 2 || rep.Quarantined != 0 || got["b"] < 1 {
		t.Fatalf("%+v, applied %v", rep, got)
	}
	c.applyFile(rj.path)
	wantApplied(t, c.applied(), map[string]int64{"a": 2, "b": 40})
}
