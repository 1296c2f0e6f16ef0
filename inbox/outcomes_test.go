// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/inbox"
)

func quarantined(t testing.TB, in *inbox.Inbox) []inbox.Quarantine {
	t.Helper()
	qs, err := in.Quarantined(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

var ignoreSince = cmpopts.IgnoreFields(inbox.Quarantine{}, "Since")

func TestTheRunsNextLineRunsTheHandlerAndCommitsWithTheHighWaterMarkAndDigest(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	rep := mustApply(t, in, lines("r", 1, 3))
	if diff := cmp.Diff(inbox.Report{Applied: 3}, rep); diff != "" {
		t.Fatal(diff)
	}
	d := rawDB(t, path)
	if n := count(t, d, `SELECT count(*) FROM applied WHERE run = 'r'`); n != 3 {
		t.Errorf("%d rows applied, want 3", n)
	}
	if p := position(t, in, "r"); p != 3 {
		t.Errorf("position %d, want 3", p)
	}
	for s := int64(1); s <= 3; s++ {
		want := sha256.Sum256(line("r", s))
		got, ok := storedDigest(t, d, "r", s)
		if !ok {
			t.Fatalf("no digest of seq %d", s)
		}
		if string(got) != string(want[:]) {
			t.Errorf("seq %d: digest %x, want %x", s, got, want)
		}
	}
}

func TestALineAtOrBelowTheHighWaterMarkWithTheSameBytesIsADuplicate(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 4))
	calls := 0
	rep, err := in.Apply(context.Background(), lines("r", 1, 4), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		calls++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Duplicates: 4}, rep); diff != "" {
		t.Error(diff)
	}
	if calls != 0 {
		t.Errorf("the handler ran %d times for duplicates", calls)
	}
	// Within one call too: a line repeated after it was applied in the same call.
	rep = mustApply(t, in, [][]byte{line("r", 5), line("r", 5), line("r", 4)})
	if diff := cmp.Diff(inbox.Report{Applied: 1, Duplicates: 2}, rep); diff != "" {
		t.Error(diff)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 5 {
		t.Errorf("%d rows, want 5", n)
	}
}

func TestALineWithinTheWindowWithOtherBytesQuarantinesTheRunAsAConflict(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 3))
	other := line("r", 2, "other bytes")
	rep := mustApply(t, in, [][]byte{other, line("r", 4), line("s", 1)})
	if diff := cmp.Diff(inbox.Report{Applied: 1, Quarantined: 2}, rep); diff != "" {
		t.Error(diff)
	}
	applied, got := sha256.Sum256(line("r", 2)), sha256.Sum256(other)
	want := []inbox.Quarantine{{RunID: "r", Reason: "conflict", Expected: 4, Got: 2,
		Detail: fmt.Sprintf("seq 2 came again with other bytes: applied sha256 %x, got sha256 %x", applied, got)}}
	if diff := cmp.Diff(want, quarantined(t, in), ignoreSince); diff != "" {
		t.Error(diff)
	}
	if p := position(t, in, "r"); p != 3 {
		t.Errorf("position %d, want 3: nothing of a quarantined run is applied", p)
	}
	if p := position(t, in, "s"); p != 1 {
		t.Errorf("run s at %d, want 1: other runs go on", p)
	}
	runs, err := collect(in.AllRuns(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]inbox.Run{{RunID: "r", Position: 3}, {RunID: "s", Position: 1}}, runs,
		cmpopts.IgnoreFields(inbox.Run{}, "LastApply")); diff != "" {
		t.Errorf("Runs: %s", diff)
	}
}

func TestALineOlderThanTheWindowIsStaleAndNeverApplied(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithDigestWindow(4))
	mustApply(t, in, lines("r", 1, 10))
	calls := 0
	count := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error { calls++; return nil }
	// seq ≤ hwm − window is stale, with the same bytes or other ones; seq 7 is the oldest still in
	// the window.
	rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("r", 6, "other"), line("r", 6), line("r", 7)}, count)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Stale: 3, Duplicates: 1}, rep); diff != "" {
		t.Error(diff)
	}
	if calls != 0 || len(quarantined(t, in)) != 0 {
		t.Errorf("%d handler calls, quarantined %v", calls, quarantined(t, in))
	}
}

func TestALineAboveTheNextSeqQuarantinesTheRunAsAGap(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 2))
	rep := mustApply(t, in, [][]byte{line("r", 5), line("r", 3), line("n", 2)})
	if diff := cmp.Diff(inbox.Report{Quarantined: 3}, rep); diff != "" {
		t.Error(diff)
	}
	want := []inbox.Quarantine{
		{RunID: "n", Reason: "gap", Expected: 1, Got: 2, Detail: "seq 2 came when the run needed seq 1: seqs 1 to 1 are missing"},
		{RunID: "r", Reason: "gap", Expected: 3, Got: 5, Detail: "seq 5 came when the run needed seq 3: seqs 3 to 4 are missing"},
	}
	if diff := cmp.Diff(want, quarantined(t, in), ignoreSince); diff != "" {
		t.Error(diff)
	}
}

func TestALineOfAQuarantinedRunIsCountedQuarantinedAndChangesNothing(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	mustApply(t, in, [][]byte{line("r", 2)})
	before := quarantined(t, in)
	rep := mustApply(t, in, lines("r", 1, 3))
	if diff := cmp.Diff(inbox.Report{Quarantined: 3}, rep); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff(before, quarantined(t, in)); diff != "" {
		t.Errorf("the quarantine changed: %s", diff)
	}
	if p := position(t, in, "r"); p != 0 {
		t.Errorf("position %d", p)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows applied", n)
	}
}

func TestAQuarantineIsDurableAndOtherRunsGoOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	rep := mustApply(t, in, [][]byte{line("a", 1), line("b", 2), line("a", 2), line("c", 1)})
	if diff := cmp.Diff(inbox.Report{Applied: 3, Quarantined: 1}, rep); diff != "" {
		t.Error(diff)
	}
	want := quarantined(t, in)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in2, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	if diff := cmp.Diff(want, quarantined(t, in2)); diff != "" || len(want) != 1 {
		t.Errorf("after a reopen: %s (before: %v)", diff, want)
	}
}

func TestQuarantineExpectedGotAndDetail(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	mustApply(t, in, lines("conflict", 1, 5))
	mustApply(t, in, lines("gap", 1, 1))
	refuse := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.RunID == "handler" && ev.Seq == 2 {
			return fmt.Errorf("unit 7 refused: %w", inbox.ErrQuarantine)
		}
		return nil
	}
	_, err := in.Apply(context.Background(), [][]byte{
		line("conflict", 5, "x"), line("gap", 4), line("handler", 1), line("handler", 2),
	}, refuse)
	if err != nil {
		t.Fatal(err)
	}
	a, g := sha256.Sum256(line("conflict", 5)), sha256.Sum256(line("conflict", 5, "x"))
	want := []inbox.Quarantine{
		{RunID: "conflict", Reason: "conflict", Expected: 6, Got: 5,
			Detail: fmt.Sprintf("seq 5 came again with other bytes: applied sha256 %x, got sha256 %x", a, g)},
		{RunID: "gap", Reason: "gap", Expected: 2, Got: 4, Detail: "seq 4 came when the run needed seq 2: seqs 2 to 3 are missing"},
		{RunID: "handler", Reason: "handler", Expected: 2, Got: 2, Detail: "unit 7 refused: " + inbox.ErrQuarantine.Error()},
	}
	qs := quarantined(t, in)
	if diff := cmp.Diff(want, qs, ignoreSince); diff != "" {
		t.Error(diff)
	}
	for _, q := range qs {
		if q.Since.IsZero() {
			t.Errorf("%s: no Since", q.RunID)
		}
	}
	if !strings.Contains(qs[0].Detail, fmt.Sprintf("%x", a)) || !strings.Contains(qs[0].Detail, fmt.Sprintf("%x", g)) {
		t.Error("a conflict's Detail must hold both digests")
	}
}

func TestInterleavedRunsAreEachAppliedInOrder(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	var ls [][]byte
	for s := int64(1); s <= 50; s++ {
		ls = append(ls, line("a", s), line("b", s), line("c", s))
	}
	var order []string
	rep, err := in.Apply(context.Background(), ls, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		order = append(order, fmt.Sprintf("%s%d", ev.RunID, ev.Seq))
		return insertHandler(ctx, tx, ev)
	})
	if err != nil || rep.Applied != 150 {
		t.Fatal(rep, err)
	}
	if order[0] != "a1" || order[1] != "b1" || order[149] != "c50" {
		t.Errorf("handler order %v...", order[:6])
	}
	for _, run := range []string{"a", "b", "c"} {
		if p := position(t, in, run); p != 50 {
			t.Errorf("run %s at %d", run, p)
		}
	}
	// Re-delivered interleaved differently: every line a duplicate.
	var again [][]byte
	for s := int64(50); s >= 1; s-- {
		again = append(again, line("c", s), line("a", s), line("b", s))
	}
	if rep := mustApply(t, in, again); rep != (inbox.Report{Duplicates: 150}) {
		t.Errorf("re-delivery: %+v", rep)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 150 {
		t.Errorf("%d rows", n)
	}
}

func TestEachLineCountsInExactlyOneReportField(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithDigestWindow(2))
	mustApply(t, in, lines("old", 1, 5))
	mustApply(t, in, lines("dup", 1, 2))
	mustApply(t, in, lines("con", 1, 2))
	mustApply(t, in, [][]byte{line("parked", 2)})
	call := [][]byte{
		line("new", 1), line("new", 2), // applied
		line("dup", 1), line("dup", 2), // duplicates
		line("old", 1), line("old", 3), // stale: seq ≤ 5 − 2
		line("con", 2, "x"), line("con", 3), // the conflict that quarantines, then a line of the run
		line("gap", 3), line("gap", 1), // the gap that quarantines, then a line of the run
		line("parked", 1), // a run quarantined before
	}
	rep := mustApply(t, in, call)
	if diff := cmp.Diff(inbox.Report{Applied: 2, Duplicates: 2, Stale: 2, Quarantined: 5}, rep); diff != "" {
		t.Error(diff)
	}
	if sum := rep.Applied + rep.Duplicates + rep.Stale + rep.Quarantined; sum != len(call) {
		t.Errorf("%d counted for %d lines", sum, len(call))
	}
}

func TestARepeatWithinOneCallIsADuplicateOrAConflictAsAcrossCalls(t *testing.T) {
	for _, w := range []int{1, 4, 4096} {
		in, _ := setup(t, inbox.WithDigestWindow(w))
		ls := append(lines("a", 1, 20), line("a", 20), line("a", 20, "other"))
		rep := mustApply(t, in, ls)
		if rep != (inbox.Report{Applied: 20, Duplicates: 1, Quarantined: 1}) {
			t.Errorf("window %d, the last line repeated then changed in the call: %+v", w, rep)
		}
		if w < 4 {
			continue
		}
		in2, _ := setup(t, inbox.WithDigestWindow(w))
		ls = append(lines("b", 1, 20), line("b", 17), line("b", 18, "other"))
		rep = mustApply(t, in2, ls)
		if rep != (inbox.Report{Applied: 20, Duplicates: 1, Quarantined: 1}) {
			t.Errorf("window %d, lines within the window repeated then changed in the call: %+v", w, rep)
		}
		if q := quarantined(t, in2); len(q) != 1 || q[0].Reason != "conflict" {
			t.Errorf("window %d: %+v", w, q)
		}
	}
}
