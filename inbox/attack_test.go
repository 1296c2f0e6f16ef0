// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// reopen closes in and opens path again with opts.
func reopen(t *testing.T, in *inbox.Inbox, path string, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in2, err := inbox.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in2.Close() })
	return in2
}

func applyOne(t *testing.T, in *inbox.Inbox, l []byte) inbox.Report {
	t.Helper()
	rep, err := in.Apply(context.Background(), [][]byte{l}, insertNothing)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestAttackWindowLoweredAcrossReopenMakesOlderSeqsStaleNotDuplicates(t *testing.T) {
	in, path := setup(t, inbox.WithDigestWindow(64))
	mustApply(t, in, lines("r", 1, 100))
	in = reopen(t, in, path, inbox.WithDigestWindow(4))
	for _, c := range []struct {
		seq   int64
		body  string
		field string
	}{
		{100, "", "dup"}, {97, "", "dup"}, {96, "", "stale"}, {90, "", "stale"}, {90, "x", "stale"}, {1, "x", "stale"},
	} {
		rep := applyOne(t, in, line("r", c.seq, c.body))
		want := inbox.Report{Duplicates: 1}
		if c.field == "stale" {
			want = inbox.Report{Stale: 1}
		}
		if rep != want {
			t.Errorf("seq %d body %q: %+v, want %+v", c.seq, c.body, rep, want)
		}
	}
	if q := quarantined(t, in); len(q) != 0 {
		t.Fatalf("quarantined: %+v", q)
	}
}

func TestAttackWindowRaisedAcrossReopenNeverTakesADroppedDigestForAConflict(t *testing.T) {
	in, path := setup(t, inbox.WithDigestWindow(1))
	mustApply(t, in, lines("r", 1, 100))
	in = reopen(t, in, path, inbox.WithDigestWindow(inbox.MaxDigestWindow))
	for seq := int64(1); seq < 100; seq++ {
		for _, body := range []string{"", "other"} {
			rep := applyOne(t, in, line("r", seq, body))
			if rep == (inbox.Report{Duplicates: 1}) {
				// a digest kept in the lowest row: allowed only with the same bytes
				if body != "" {
					t.Fatalf("seq %d other bytes counted duplicate", seq)
				}
				continue
			}
			if rep == (inbox.Report{Quarantined: 1}) {
				// other bytes under a digest the lowest row still holds: a true conflict
				if _, kept := storedDigest(t, rawDB(t, path), "r", seq); !kept || body == "" {
					t.Fatalf("seq %d body %q quarantined the run without a digest kept", seq, body)
				}
				if err := in.Release(context.Background(), "r"); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if rep != (inbox.Report{Stale: 1}) {
				t.Fatalf("seq %d body %q: %+v, want Stale", seq, body, rep)
			}
		}
	}
	if rep := applyOne(t, in, line("r", 100, "x")); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("seq 100 with other bytes: %+v, want a conflict", rep)
	}
	// then the window is honoured from here on
	in2 := reopen(t, in, path, inbox.WithDigestWindow(inbox.MaxDigestWindow))
	if err := in2.Release(context.Background(), "r"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, in2, lines("r", 101, 200))
	for seq := int64(101); seq <= 200; seq += 7 {
		if rep := applyOne(t, in2, line("r", seq)); rep != (inbox.Report{Duplicates: 1}) {
			t.Fatalf("seq %d: %+v, want duplicate", seq, rep)
		}
	}
}

func TestAttackGivenUpSeqsComingLaterAreStaleAndTheOthersStillDuplicates(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 5))
	mustApply(t, in, [][]byte{line("r", 10)})
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != 9 {
		t.Fatalf("position %d", p)
	}
	for seq := int64(6); seq <= 9; seq++ {
		for _, body := range []string{"", "x"} {
			if rep := applyOne(t, in, line("r", seq, body)); rep != (inbox.Report{Stale: 1}) {
				t.Fatalf("given-up seq %d body %q: %+v, want Stale", seq, body, rep)
			}
		}
	}
	for seq := int64(1); seq <= 5; seq++ {
		if rep := applyOne(t, in, line("r", seq)); rep != (inbox.Report{Duplicates: 1}) {
			t.Fatalf("seq %d: %+v, want duplicate", seq, rep)
		}
	}
	if rep := applyOne(t, in, line("r", 3, "x")); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("seq 3 other bytes: %+v, want conflict", rep)
	}
}

func TestAttackAGapOfBillionsAcceptedCostsNoDigestRowsAndTheRunGoesOn(t *testing.T) {
	ctx := context.Background()
	in, path := setup(t, inbox.WithDigestWindow(inbox.MaxDigestWindow))
	mustApply(t, in, lines("r", 1, 3))
	big := int64(1) << 40
	mustApply(t, in, [][]byte{line("r", big)})
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	if rep := mustApply(t, in, [][]byte{line("r", big), line("r", big+1)}); rep != (inbox.Report{Applied: 2}) {
		t.Fatalf("%+v", rep)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM inbox_digests WHERE engine_run_id = 'r'`); n > 4 {
		t.Fatalf("%d digest rows", n)
	}
	for _, seq := range []int64{big - 1, big - 20, 2} {
		rep := applyOne(t, in, line("r", seq))
		if rep != (inbox.Report{Stale: 1}) && !(seq == 2 && rep == (inbox.Report{Duplicates: 1})) {
			t.Fatalf("seq %d: %+v", seq, rep)
		}
	}
}

func TestAttackSeqsNearTheInt64LimitAreAppliedAndRecognised(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t, inbox.WithDigestWindow(64))
	mustApply(t, in, lines("r", 1, 1))
	top := int64(math.MaxInt64)
	mustApply(t, in, [][]byte{line("r", top-20)})
	if err := in.AcceptGap(ctx, "r", "jump"); err != nil {
		t.Fatal(err)
	}
	var ls [][]byte
	for seq := top - 20; ; seq++ {
		ls = append(ls, line("r", seq))
		if seq == top {
			break
		}
	}
	rep, err := in.Apply(ctx, ls, insertNothing)
	if err != nil {
		t.Fatal(err)
	}
	if rep != (inbox.Report{Applied: 21}) {
		t.Fatalf("%+v", rep)
	}
	for seq := top - 20; seq > 0; seq++ {
		if rep := applyOne(t, in, line("r", seq)); rep != (inbox.Report{Duplicates: 1}) {
			t.Fatalf("seq %d: %+v, want duplicate", seq, rep)
		}
	}
	if rep := applyOne(t, in, line("r", top, "x")); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("top with other bytes: %+v, want conflict", rep)
	}
}

func TestAttackRetentionTrimKeepsTheLastDigestAndMakesTheRestStale(t *testing.T) {
	in, path := setup(t, inbox.WithDigestRetention(time.Millisecond))
	mustApply(t, in, lines("r", 1, 50))
	time.Sleep(20 * time.Millisecond)
	// other runs' calls do the trimming
	for i := 0; i < 5; i++ {
		mustApply(t, in, lines(fmt.Sprintf("o%d", i), 1, 1))
		time.Sleep(2 * time.Millisecond)
	}
	if n := digestsKept(t, rawDB(t, path), "r"); n > 16 {
		t.Logf("digests kept for r: %d (trim is bounded per call)", n)
	}
	if rep := applyOne(t, in, line("r", 50)); rep != (inbox.Report{Duplicates: 1}) {
		t.Fatalf("last line: %+v, want duplicate", rep)
	}
	for _, seq := range []int64{49, 10, 1} {
		for _, body := range []string{"", "x"} {
			rep := applyOne(t, in, line("r", seq, body))
			if rep == (inbox.Report{Quarantined: 1}) {
				t.Fatalf("seq %d body %q quarantined the run", seq, body)
			}
			if body == "x" && rep != (inbox.Report{Stale: 1}) {
				t.Fatalf("seq %d other bytes: %+v", seq, rep)
			}
		}
	}
	if rep := applyOne(t, in, line("r", 50, "x")); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("last line other bytes: %+v, want conflict", rep)
	}
}

func TestAttackRunIDsWithNULControlBytesAndLengthAreDistinctRuns(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t)
	long := strings.Repeat("x", 70000)
	runs := []string{"a\x00b", "a\x00c", "a", "a\x00", "\x01\x7f\t", long, long + "y"}
	mk := func(run string, seq int64, body string) []byte {
		j, _ := jsonString(run)
		return fmt.Appendf(nil, `{"engine_run_id":%s,"seq":%d,"type":"t","data":%q}`, j, seq, body)
	}
	for i, r := range runs {
		var ls [][]byte
		for s := int64(1); s <= int64(i+1); s++ {
			ls = append(ls, mk(r, s, ""))
		}
		rep, err := in.Apply(ctx, ls, insertNothing)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if rep.Applied != i+1 {
			t.Fatalf("run %d: %+v", i, rep)
		}
	}
	for i, r := range runs {
		if p := position(t, in, r); p != int64(i+1) {
			t.Fatalf("run %d position %d", i, p)
		}
	}
	// a conflict on one NUL run quarantines that one only
	if rep, err := in.Apply(ctx, [][]byte{mk(runs[0], 1, "x")}, insertNothing); err != nil || rep.Quarantined != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	q := quarantined(t, in)
	if len(q) != 1 || q[0].RunID != runs[0] {
		t.Fatalf("%+v", q)
	}
	if err := in.Release(ctx, runs[1]); !errors.Is(err, inbox.ErrNotQuarantined) {
		t.Fatalf("release of the other NUL run: %v", err)
	}
	if err := in.Release(ctx, runs[0]); err != nil {
		t.Fatal(err)
	}
	rs, err := collect(in.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(runs) {
		t.Fatalf("%d runs listed", len(rs))
	}
	// invalid UTF-8 in the run id is malformed and leaves nothing
	_, err = in.Apply(ctx, [][]byte{[]byte("{\"engine_run_id\":\"a\xffb\",\"seq\":1}")}, insertNothing)
	var le *inbox.LineError
	if !errors.As(err, &le) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

func TestAttackABatchHookThatWritesToTheInboxDoesNotDeadlock(t *testing.T) {
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

func TestAttackCloseDuringFollowFileEndsItWithErrClosed(t *testing.T) {
	in, _ := setup(t, inbox.WithPollInterval(10*time.Millisecond))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(path, append(line("r", 1), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(ctx, path, insertNothing) }()
	for position(t, in, "r") != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, inbox.ErrClosed) {
			t.Fatalf("FollowFile after Close: %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		cancel()
		<-done
		t.Fatal("FollowFile went on after Close")
	}
}

func TestAttackHandlerCancellingItsContextCommitsNothing(t *testing.T) {
	in, path := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	rep, err := in.Apply(ctx, lines("r", 1, 3), func(c context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 2 {
			cancel()
		}
		return insertHandler(c, tx, ev)
	})
	if !errors.Is(err, context.Canceled) || rep != (inbox.Report{}) {
		t.Fatalf("%+v %v", rep, err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Fatalf("%d rows", n)
	}
	if p := position(t, in, "r"); p != 0 {
		t.Fatalf("position %d", p)
	}
	mustApply(t, in, lines("r", 1, 3))
}

func TestAttackConcurrentCallsApplyEachLineOnce(t *testing.T) {
	in, path := setup(t, inbox.WithDigestWindow(1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := inbox.Report{}
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := int64(1); s <= 40; s += 4 {
				rep, err := in.Apply(context.Background(), lines("r", s, s+3), insertHandler)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total.Applied += rep.Applied
				total.Duplicates += rep.Duplicates
				total.Stale += rep.Stale
				total.Quarantined += rep.Quarantined
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if total.Applied != 40 || total.Quarantined != 0 {
		t.Fatalf("%+v", total)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 40 {
		t.Fatalf("%d", n)
	}
}

func TestAttackApplyFileOnADirectoryOrTheInboxsOwnDatabaseIsRefused(t *testing.T) {
	in, dbPath := setup(t)
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := in.ApplyFile(ctx, dir, insertNothing); err == nil {
		t.Fatal("a directory was applied")
	}
	rep, err := in.ApplyFile(ctx, dbPath, insertNothing)
	if err == nil || rep != (inbox.Report{}) {
		t.Fatalf("own database: %+v %v", rep, err)
	}
	t.Logf("own database: %v", err)
	srcs, err := in.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 0 {
		t.Fatalf("refused calls left sources: %+v", srcs)
	}
}

func jsonString(s string) (string, error) {
	b, err := jsonMarshal(s)
	return string(b), err
}

var jsonMarshal = json.Marshal
