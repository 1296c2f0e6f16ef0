// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/inbox"
)

// TestAcceptGap gathers what giving up a gap's missing seqs does: the decision recorded and the
// high-water mark moved past the gap, only for a gap, and the seqs given up stale whenever they come.
func TestAcceptGap(t *testing.T) {
	t.Run("AcceptGapRecordsTheDecisionAndMovesTheHighWaterMarkPastTheGap", acceptGapRecordsTheDecisionAndMovesTheHighWaterMarkPastTheGap)
	t.Run("AcceptGapIsOnlyForAGap", acceptGapIsOnlyForAGap)
	t.Run("GivenUpSeqsComingLaterAreStaleAndTheOthersStillDuplicates", givenUpSeqsComingLaterAreStaleAndTheOthersStillDuplicates)
	t.Run("GivenUpSeqsInsideADigestRowAreStaleOnceTheRowGoesOn", givenUpSeqsInsideADigestRowAreStaleOnceTheRowGoesOn)
	t.Run("AGapAcceptedBeforeARunsFirstLineMakesItsEarlierSeqsStale", aGapAcceptedBeforeARunsFirstLineMakesItsEarlierSeqsStale)
	t.Run("AGapOfBillionsAcceptedCostsNoDigestRowsAndTheRunGoesOn", aGapOfBillionsAcceptedCostsNoDigestRowsAndTheRunGoesOn)
}

func acceptGapRecordsTheDecisionAndMovesTheHighWaterMarkPastTheGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t, inbox.WithOperator("alice"))
	mustApply(t, in, lines("r", 1, 2))
	mustApply(t, in, [][]byte{line("r", 6), line("r", 7)})
	start := time.Now()
	if err := in.AcceptGap(ctx, "r", "seqs 3-5 were lost with the old disk"); err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != 5 {
		t.Errorf("position %d, want 5: past the gap", p)
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []inbox.AcceptedGap{{RunID: "r", FirstSeq: 3, LastSeq: 5, Reason: "seqs 3-5 were lost with the old disk", AcceptedBy: "alice"}}
	if diff := cmp.Diff(want, gaps, cmpopts.IgnoreFields(inbox.AcceptedGap{}, "AcceptedAt")); diff != "" {
		t.Error(diff)
	}
	if len(gaps) == 1 && gaps[0].AcceptedAt.Before(start.Add(-time.Second)) {
		t.Errorf("accepted at %v", gaps[0].AcceptedAt)
	}
	// The run goes on at the seq that came; the seqs given up are never applied.
	if rep := mustApply(t, in, lines("r", 1, 7)); rep != (inbox.Report{Duplicates: 2, Stale: 3, Applied: 2}) {
		t.Errorf("after accepting the gap: %+v", rep)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied WHERE run = 'r' AND seq BETWEEN 3 AND 5`); n != 0 {
		t.Errorf("%d lines of the gap applied", n)
	}
	// Durable: the record is there after a reopen.
	in.Close()
	in2, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	if again, _ := in2.AcceptedGaps(ctx); len(again) != 1 {
		t.Errorf("after a reopen: %v", again)
	}
}

func acceptGapIsOnlyForAGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, lines("c", 1, 1))
	mustApply(t, in, [][]byte{line("c", 1, "other")})
	if err := in.AcceptGap(ctx, "c", "why not"); !errors.Is(err, inbox.ErrNotGap) {
		t.Errorf("AcceptGap of a conflict: %v, want ErrNotGap", err)
	}
	if qs := quarantined(t, in); len(qs) != 1 {
		t.Errorf("the conflict's quarantine changed: %v", qs)
	}
	mustApply(t, in, [][]byte{line("g", 2)})
	if err := in.AcceptGap(ctx, "g", ""); err == nil {
		t.Error("AcceptGap with no reason succeeded")
	}
	if err := in.AcceptGap(ctx, "g", "bad\x00reason"); err == nil {
		t.Error("AcceptGap with a control byte in its reason succeeded")
	}
	if gaps, _ := in.AcceptedGaps(ctx); len(gaps) != 0 {
		t.Errorf("recorded %v", gaps)
	}
}

func givenUpSeqsComingLaterAreStaleAndTheOthersStillDuplicates(t *testing.T) {
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

func givenUpSeqsInsideADigestRowAreStaleOnceTheRowGoesOn(t *testing.T) {
	ctx := context.Background()
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 5))
	mustApply(t, in, [][]byte{line("r", 10)})
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, in, lines("r", 10, 12))
	if _, kept := storedDigest(t, rawDB(t, path), "r", 7); !kept {
		t.Log("no zeros stored for the given-up seqs") // either is fine; the outcome is what counts
	}
	in = reopen(t, in, path)
	for seq := int64(6); seq <= 9; seq++ {
		for _, body := range []string{"", "x"} {
			if rep := applyOne(t, in, line("r", seq, body)); rep != (inbox.Report{Stale: 1}) {
				t.Fatalf("given-up seq %d body %q: %+v, want Stale", seq, body, rep)
			}
		}
	}
	for _, seq := range []int64{1, 5, 10, 12} {
		if rep := applyOne(t, in, line("r", seq)); rep != (inbox.Report{Duplicates: 1}) {
			t.Fatalf("seq %d: %+v, want duplicate", seq, rep)
		}
	}
}

func aGapAcceptedBeforeARunsFirstLineMakesItsEarlierSeqsStale(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 5)})
	if err := in.AcceptGap(ctx, "r", "started late"); err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != 4 {
		t.Fatalf("position %d", p)
	}
	if rep := mustApply(t, in, lines("r", 1, 6)); rep != (inbox.Report{Stale: 4, Applied: 2}) {
		t.Fatalf("%+v", rep)
	}
	if err := in.AcceptGap(ctx, "r", "again"); err == nil {
		t.Fatal("a second AcceptGap of a run not quarantined succeeded")
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil || len(gaps) != 1 || gaps[0].FirstSeq != 1 || gaps[0].LastSeq != 4 {
		t.Fatalf("%+v %v", gaps, err)
	}
}

func aGapOfBillionsAcceptedCostsNoDigestRowsAndTheRunGoesOn(t *testing.T) {
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
