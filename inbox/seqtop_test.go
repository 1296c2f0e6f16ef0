// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/inbox"
)

const top = int64(math.MaxInt64)

// runAtTheTop makes run r apply seq top-1 past an accepted gap, then seq top, the last a run can have.
func runAtTheTop(t *testing.T) *inbox.Inbox {
	t.Helper()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 1)})
	if rep := mustApply(t, in, [][]byte{line("r", top-1)}); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("%+v", rep)
	}
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != top-2 {
		t.Fatalf("position %d after the gap was accepted", p)
	}
	if rep := mustApply(t, in, [][]byte{line("r", top-1), line("r", top)}); rep != (inbox.Report{Applied: 2}) {
		t.Fatalf("%+v", rep)
	}
	return in
}

func TestAConflictAtTheLastSeqRecordsThatTheRunNeedsNoNextSeq(t *testing.T) {
	t.Parallel()
	in := runAtTheTop(t)
	if rep := mustApply(t, in, [][]byte{line("r", top, "other")}); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("%+v", rep)
	}
	qs := quarantined(t, in)
	want := []inbox.Quarantine{{RunID: "r", Reason: "conflict", Expected: 0, Got: top}}
	if diff := cmp.Diff(want, qs, ignoreSince, cmpopts.IgnoreFields(inbox.Quarantine{}, "Detail")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestAConflictBelowTheLastSeqOfARunAtTheTopRecordsThatTheRunNeedsNoNextSeq(t *testing.T) {
	t.Parallel()
	in := runAtTheTop(t)
	if rep := mustApply(t, in, [][]byte{line("r", top-1, "other")}); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("%+v", rep)
	}
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Expected != 0 || qs[0].Got != top-1 {
		t.Errorf("%+v", qs)
	}
}

func TestARunAtTheLastSeqIsReleasedAndListedAtItAndItsLastLineIsADuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := runAtTheTop(t)
	mustApply(t, in, [][]byte{line("r", top, "other")})
	if err := in.Release(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if rep := mustApply(t, in, [][]byte{line("r", top-1), line("r", top)}); rep != (inbox.Report{Duplicates: 2}) {
		t.Errorf("after the release: %+v", rep)
	}
	runs, err := collect(in.AllRuns(ctx))
	if err != nil || len(runs) != 1 || runs[0].Position != top {
		t.Errorf("runs %+v, %v", runs, err)
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil || len(gaps) != 1 || gaps[0].FirstSeq != 2 || gaps[0].LastSeq != top-2 {
		t.Errorf("accepted gaps %+v, %v", gaps, err)
	}
}

func TestAGapUpToTheLastSeqRecordsTheSeqsMissingAndIsAcceptedUpToTheSeqBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 1), line("r", top)})
	qs := quarantined(t, in)
	if len(qs) != 1 || qs[0].Reason != "gap" || qs[0].Expected != 2 || qs[0].Got != top {
		t.Fatalf("%+v", qs)
	}
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != top-1 {
		t.Errorf("position %d", p)
	}
	if rep := mustApply(t, in, [][]byte{line("r", top)}); rep != (inbox.Report{Applied: 1}) {
		t.Errorf("%+v", rep)
	}
}

func TestAHandlersRefusalOfTheLastSeqRecordsThatSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 1), line("r", top)})
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	rep, err := in.Apply(ctx, [][]byte{line("r", top)}, func(context.Context, *sql.Tx, inbox.Event) error {
		return fmt.Errorf("no: %w", inbox.ErrQuarantine)
	})
	if err != nil || rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("%+v, %v", rep, err)
	}
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Reason != "handler" || qs[0].Expected != top || qs[0].Got != top {
		t.Errorf("%+v", qs)
	}
}

func TestARunAtTheLastSeqTrimmedForIdlenessKeepsItsLastDigest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	in, path := setup(t, inbox.WithDigestRetention(time.Hour), inbox.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	var ls [][]byte
	for seq := top - 40; seq > 0; seq++ {
		ls = append(ls, line("r", seq))
	}
	mustApply(t, in, [][]byte{line("r", 1), ls[0]})
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	if rep := mustApply(t, in, ls); rep != (inbox.Report{Applied: 41}) {
		t.Fatalf("%+v", rep)
	}
	now.Add(int64(2 * time.Hour))
	mustApply(t, in, lines("other", 1, 1)) // a call after the retention trims run r
	if n := digestsKept(t, rawDB(t, path), "r"); n != 1 {
		t.Errorf("%d digests kept for the idle run, want its last only", n)
	}
	if rep := mustApply(t, in, [][]byte{line("r", top)}); rep != (inbox.Report{Duplicates: 1}) {
		t.Errorf("the last line again: %+v", rep)
	}
	if rep := mustApply(t, in, [][]byte{line("r", top-1, "other")}); rep != (inbox.Report{Stale: 1}) {
		t.Errorf("a trimmed line with other bytes: %+v", rep)
	}
	if rep := mustApply(t, in, [][]byte{line("r", top, "other")}); rep != (inbox.Report{Quarantined: 1}) {
		t.Errorf("the last line with other bytes: %+v", rep)
	}
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Reason != "conflict" || qs[0].Expected != 0 || qs[0].Got != top {
		t.Errorf("%+v", qs)
	}
}

func TestSeqsNearTheInt64LimitAreAppliedAndRecognised(t *testing.T) {
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
