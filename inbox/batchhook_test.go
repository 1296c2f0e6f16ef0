// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/inboxseam"
)

// hookCall is one call of a batch hook.
type hookCall struct {
	Source string
	Report inbox.Report
}

func TestTheBatchHookSeesEachBatchAFileSourceCommitsWithItsReport(t *testing.T) {
	t.Parallel()
	var calls []hookCall
	var in *inbox.Inbox
	var positions []int64
	in, _ = setup(t, inbox.WithBatchLines(3), inbox.WithBatchHook(func(source string, r inbox.Report) {
		calls = append(calls, hookCall{source, r})
		// Called outside the write transaction: the hook may read the inbox.
		positions = append(positions, position(t, in, "r"))
	}))
	jpath := filepath.Join(t.TempDir(), "journal.jsonl")
	// Seven lines, the third and fourth of them repeated (a relay's re-delivery after a crash).
	ls := lines("r", 1, 4)
	ls = append(ls, line("r", 3), line("r", 4))
	ls = append(ls, lines("r", 5, 7)...)
	writeJournal(t, jpath, ls)
	rep, err := in.ApplyFile(context.Background(), jpath, insertHandler)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(jpath)
	src := inboxseam.FileSourcePrefix + abs
	want := []hookCall{
		{src, inbox.Report{Applied: 3}},
		{src, inbox.Report{Applied: 1, Duplicates: 2}},
		{src, inbox.Report{Applied: 3}},
	}
	if d := cmp.Diff(want, calls); d != "" {
		t.Errorf("hook calls (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{3, 4, 7}, positions); d != "" {
		t.Errorf("positions the hook read (-want +got):\n%s", d)
	}
	var sum inbox.Report
	for _, c := range calls {
		sum.Applied += c.Report.Applied
		sum.Duplicates += c.Report.Duplicates
	}
	if sum != rep {
		t.Errorf("the hook's sum %+v, ApplyFile's report %+v", sum, rep)
	}
	// Nothing new: nothing committed, no call.
	calls = nil
	if _, err := in.ApplyFile(context.Background(), jpath, insertHandler); err != nil || len(calls) != 0 {
		t.Errorf("ApplyFile of nothing new: %v, %d hook calls", err, len(calls))
	}
}

func TestTheBatchHookIsNotCalledForApplyOrForABatchThatDidNotCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls []hookCall
	in, _ := setup(t, inbox.WithBatchHook(func(source string, r inbox.Report) { calls = append(calls, hookCall{source, r}) }))
	mustApply(t, in, lines("r", 1, 2))
	if len(calls) != 0 {
		t.Errorf("Apply called the hook: %+v", calls)
	}
	failing := func(context.Context, *sql.Tx, inbox.Event) error { return errors.New("refused") }
	if _, err := in.ApplyFrom(ctx, "s", nil, []byte("1"), lines("r", 3, 4), failing); err == nil {
		t.Fatal("a failing handler's batch committed")
	}
	if _, err := in.ApplyFrom(ctx, "s", []byte("elsewhere"), []byte("1"), lines("r", 3, 4), insertHandler); !errors.Is(err, inbox.ErrSourceMoved) {
		t.Fatalf("from a position not stored: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := in.ApplyFrom(cctx, "s", nil, []byte("1"), lines("r", 3, 4), insertHandler); err == nil {
		t.Fatal("a cancelled batch committed")
	}
	if len(calls) != 0 {
		t.Errorf("batches that did not commit called the hook: %+v", calls)
	}
	if _, err := in.ApplyFrom(ctx, "s", nil, []byte("1"), lines("r", 3, 4), insertHandler); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]hookCall{{"s", inbox.Report{Applied: 2}}}, calls); d != "" {
		t.Errorf("hook calls (-want +got):\n%s", d)
	}
}

// Not parallel: the fault point hook is the process's, and parallel tests wait until this one ends.
func TestAFileSourcePassesItsBetweenBatchesPointPerBatchAndItsTornTailPointAtALineWithoutNewline(t *testing.T) {
	hits := map[string]int{}
	var mu sync.Mutex
	faultpoint.Set(func(p string) {
		mu.Lock()
		hits[p]++
		mu.Unlock()
	})
	defer faultpoint.Set(nil)
	in, _ := setup(t, inbox.WithBatchLines(2))
	jpath := filepath.Join(t.TempDir(), "journal.jsonl")
	writeJournal(t, jpath, lines("r", 1, 5))
	if _, err := in.ApplyFile(context.Background(), jpath, insertHandler); err != nil {
		t.Fatal(err)
	}
	if hits[faultpoint.InboxBetweenBatches] != 3 || hits[faultpoint.InboxTornTail] != 0 {
		t.Errorf("a whole journal of 3 batches: %v", hits)
	}
	f, err := os.OpenFile(jpath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(line("r", 6)[:10]) // a writer killed in the middle of its append
	f.Close()
	clear(hits)
	if _, err := in.ApplyFile(context.Background(), jpath, insertHandler); err != nil {
		t.Fatal(err)
	}
	if hits[faultpoint.InboxBetweenBatches] != 0 || hits[faultpoint.InboxTornTail] != 1 {
		t.Errorf("a torn tail after what was applied: %v", hits)
	}
	if p := position(t, in, "r"); p != 5 {
		t.Errorf("run at %d, want 5: the torn line is not taken", p)
	}
}

func TestABatchHookThatPanicsReachesTheCallerWithTheBatchCommitted(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithBatchHook(func(string, inbox.Report) { panic("hook") }))
	func() {
		defer func() {
			if r := recover(); r != "hook" {
				t.Errorf("recovered %v, want the hook's panic", r)
			}
		}()
		in.ApplyFrom(context.Background(), "s", nil, []byte("1"), lines("r", 1, 3), insertHandler)
	}()
	if p := position(t, in, "r"); p != 3 {
		t.Errorf("run at %d after the hook's panic, want 3", p)
	}
	if pos, err := in.SourcePosition(context.Background(), "s"); err != nil || string(pos) != "1" {
		t.Errorf("source at %q, %v", pos, err)
	}
	// The inbox goes on: the writer was given back before the hook ran.
	mustApply(t, in, lines("r", 4, 4))
}

func TestABatchHookThatWritesToTheInboxDoesNotDeadlock(t *testing.T) {
	var in *inbox.Inbox
	var hookErr error
	calls := 0
	in, _ = setup(t, inbox.WithBatchHook(func(source string, r inbox.Report) {
		calls++
		// A bound for a deadlock, not a measure: a loaded machine may take seconds.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, hookErr = in.Apply(ctx, [][]byte{line("hook", int64(calls))}, insertNothing)
	}))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(path, append(line("r", 1), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFile(context.Background(), path, insertNothing); err != nil {
		t.Fatal(err)
	}
	if hookErr != nil || calls != 1 {
		t.Fatalf("hook %d calls: %v", calls, hookErr)
	}
	if p := position(t, in, "hook"); p != 1 {
		t.Fatalf("hook's apply: %d", p)
	}
}

func TestABatchHookThatCallsGoexitLeavesTheInboxUsable(t *testing.T) {
	in, _ := setup(t, inbox.WithBatchLines(2), inbox.WithBatchHook(func(string, inbox.Report) { runtime.Goexit() }))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	var b []byte
	for _, l := range lines("r", 1, 5) {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.ApplyFile(context.Background(), path, insertNothing)
	}()
	<-done
	if p := position(t, in, "r"); p != 2 {
		t.Fatalf("position %d, want the first batch", p)
	}
	// Bounds for a hang, not measures: a loaded machine may take seconds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := in.Apply(ctx, lines("r", 3, 3), insertNothing); err != nil {
		t.Fatalf("after the hook's Goexit: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- in.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close hung after the hook's Goexit")
	}
}
