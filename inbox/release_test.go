// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/inbox"
)

func TestReleaseLiftsTheQuarantineAndTheRunGoesOnFromItsHighWaterMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 2))
	mustApply(t, in, [][]byte{line("r", 2, "other")}) // a conflict
	if err := in.Release(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if qs := quarantined(t, in); len(qs) != 0 {
		t.Fatalf("still quarantined: %v", qs)
	}
	// The source reads from its start again: what was applied is a duplicate, the rest applies.
	if rep := mustApply(t, in, lines("r", 1, 4)); rep != (inbox.Report{Duplicates: 2, Applied: 2}) {
		t.Errorf("after the release: %+v", rep)
	}
}

func TestAGapStillThereAfterAReleaseQuarantinesTheRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 1), line("r", 3)})
	if err := in.Release(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if rep := mustApply(t, in, [][]byte{line("r", 1), line("r", 3)}); rep != (inbox.Report{Duplicates: 1, Quarantined: 1}) {
		t.Errorf("%+v", rep)
	}
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Reason != "gap" || qs[0].Expected != 2 {
		t.Errorf("quarantined %v", qs)
	}
}

func TestReleaseOfARunThatIsNotQuarantinedIsErrNotQuarantined(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 1))
	for _, run := range []string{"r", "never seen"} {
		if err := in.Release(context.Background(), run); !errors.Is(err, inbox.ErrNotQuarantined) {
			t.Errorf("Release(%q): %v", run, err)
		}
	}
	if err := in.AcceptGap(context.Background(), "r", "lost"); !errors.Is(err, inbox.ErrNotQuarantined) {
		t.Errorf("AcceptGap: %v", err)
	}
}

func TestReleaseAndAcceptGapRewindEverySource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, how := range []string{"release", "accept gap"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			in, _ := setup(t)
			if _, err := in.ApplyFrom(ctx, "file:/a", nil, []byte("a1"), [][]byte{line("r", 1), line("r", 3)}, insertHandler); err != nil {
				t.Fatal(err)
			}
			if _, err := in.ApplyFrom(ctx, "nats:S", nil, []byte("n1"), lines("s", 1, 1), insertHandler); err != nil {
				t.Fatal(err)
			}
			var err error
			if how == "release" {
				err = in.Release(ctx, "r")
			} else {
				err = in.AcceptGap(ctx, "r", "line 2 was lost with the old disk")
			}
			if err != nil {
				t.Fatal(err)
			}
			srcs, err := in.Sources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(srcs) != 2 {
				t.Fatalf("sources %v", srcs)
			}
			for _, s := range srcs {
				if s.Position != nil {
					t.Errorf("source %s at %q after %s, want rewound", s.Name, s.Position, how)
				}
				if p, err := in.SourcePosition(ctx, s.Name); err != nil || p != nil {
					t.Errorf("SourcePosition(%s) = %q, %v", s.Name, p, err)
				}
			}
			// A rewound source starts again from none.
			if _, err := in.ApplyFrom(ctx, "file:/a", nil, []byte("a2"), nil, insertHandler); err != nil {
				t.Errorf("ApplyFrom from none after the rewind: %v", err)
			}
		})
	}
}

func TestAcceptGapRecordsTheDecisionAndMovesTheHighWaterMarkPastTheGap(t *testing.T) {
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

func TestAcceptGapIsOnlyForAGap(t *testing.T) {
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

func TestApplyFromStoresThePositionWithTheEffectsOnlyFromTheStoredOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	const src = "file:/var/journal.jsonl"
	if _, err := in.ApplyFrom(ctx, src, nil, []byte("p1"), lines("r", 1, 2), insertHandler); err != nil {
		t.Fatal(err)
	}
	// Stale from: nothing applied, nothing stored.
	for _, from := range [][]byte{nil, []byte("p0"), []byte("p1x")} {
		rep, err := in.ApplyFrom(ctx, src, from, []byte("p2"), lines("r", 3, 4), insertHandler)
		if !errors.Is(err, inbox.ErrSourceMoved) || rep != (inbox.Report{}) {
			t.Errorf("from %q: %+v, %v; want ErrSourceMoved", from, rep, err)
		}
	}
	if p := position(t, in, "r"); p != 2 {
		t.Errorf("position %d", p)
	}
	rep, err := in.ApplyFrom(ctx, src, []byte("p1"), []byte("p2"), lines("r", 3, 4), insertHandler)
	if err != nil || rep.Applied != 2 {
		t.Fatal(rep, err)
	}
	if pos, _ := in.SourcePosition(ctx, src); !bytes.Equal(pos, []byte("p2")) {
		t.Errorf("position %q", pos)
	}
	// A handler error: the position stays with the effects.
	_, err = in.ApplyFrom(ctx, src, []byte("p2"), []byte("p3"), lines("r", 5, 5), func(context.Context, *sql.Tx, inbox.Event) error {
		return errors.New("no")
	})
	if err == nil {
		t.Fatal("the handler's error was lost")
	}
	if pos, _ := in.SourcePosition(ctx, src); !bytes.Equal(pos, []byte("p2")) {
		t.Errorf("position %q after a failed call", pos)
	}
	// No lines: only a check, or a first position.
	if _, err := in.ApplyFrom(ctx, src, []byte("p2"), []byte("p2"), nil, insertHandler); err != nil {
		t.Errorf("check only: %v", err)
	}
	if _, err := in.ApplyFrom(ctx, "nats:S", nil, []byte("n1"), nil, insertHandler); err != nil {
		t.Errorf("first position: %v", err)
	}
	if srcs, _ := in.Sources(ctx); len(srcs) != 2 || srcs[0].Name != src || srcs[0].Updated.IsZero() {
		t.Errorf("sources %+v", srcs)
	}
	// Apply never touches the sources.
	mustApply(t, in, lines("r", 5, 5))
	if pos, _ := in.SourcePosition(ctx, src); !bytes.Equal(pos, []byte("p2")) {
		t.Errorf("position %q after Apply", pos)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM inbox_sources`); n != 2 {
		t.Errorf("%d source rows", n)
	}
}

func TestApplyFromRefusesASourceNameNoSourceHas(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	for _, name := range []string{"", "a\x00b", "a\nb", "\xff", string(make([]byte, inbox.MaxSourceNameLen+1))} {
		if _, err := in.ApplyFrom(context.Background(), name, nil, []byte("p"), lines("r", 1, 1), insertHandler); err == nil {
			t.Errorf("source %q accepted", name)
		}
	}
	if _, err := in.ApplyFrom(context.Background(), "file:/x", nil, make([]byte, inbox.MaxPositionLen+1), lines("r", 1, 1), insertHandler); err == nil {
		t.Error("a position over the limit accepted")
	}
	if p := position(t, in, "r"); p != 0 {
		t.Errorf("position %d", p)
	}
}

func TestGivenUpSeqsComingLaterAreStaleAndTheOthersStillDuplicates(t *testing.T) {
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

func TestAGapOfBillionsAcceptedCostsNoDigestRowsAndTheRunGoesOn(t *testing.T) {
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

func TestARefusedAcceptGapOrReleaseLeavesTheQuarantine(t *testing.T) {
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 2))
	mustApply(t, in, [][]byte{line("r", 5)})
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := in.AcceptGap(ctx, "r", strings.Repeat("x", inbox.MaxReasonLen+1)); err == nil {
		t.Fatal("a reason over the limit was accepted")
	}
	if err := in.AcceptGap(ctx, "r", "bad \xff utf-8"); err == nil {
		t.Log("a reason that is not UTF-8 was accepted")
	}
	if err := in.AcceptGap(cancelled, "r", "ok"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcceptGap: %v", err)
	}
	if err := in.Release(cancelled, "r"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Release: %v", err)
	}
	q := quarantined(t, in)
	if len(q) != 1 || q[0].Reason != "gap" || position(t, in, "r") != 2 {
		t.Fatalf("quarantine after refused calls: %+v, position %d", q, position(t, in, "r"))
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil || len(gaps) > 1 {
		t.Fatalf("%+v %v", gaps, err)
	}
}

func TestApplyFromRefusesABadSourceOrPositionAndAppliesNothing(t *testing.T) {
	in, _ := setup(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		source string
		to     []byte
	}{
		"empty name":       {"", []byte("1")},
		"long name":        {strings.Repeat("s", inbox.MaxSourceNameLen+1), []byte("1")},
		"invalid utf-8":    {"s\xff", []byte("1")},
		"position too big": {"s", bytes.Repeat([]byte("1"), inbox.MaxPositionLen+1)},
	} {
		rep, err := in.ApplyFrom(ctx, c.source, nil, c.to, lines("r", 1, 2), insertHandler)
		if err == nil || rep != (inbox.Report{}) {
			t.Errorf("%s: %+v %v", name, rep, err)
		}
	}
	if p := position(t, in, "r"); p != 0 {
		t.Fatalf("refused calls applied up to %d", p)
	}
	if srcs, err := in.Sources(ctx); err != nil || len(srcs) != 0 {
		t.Fatalf("%+v %v", srcs, err)
	}
}

func TestGivenUpSeqsInsideADigestRowAreStaleOnceTheRowGoesOn(t *testing.T) {
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

func TestAGapAcceptedBeforeARunsFirstLineMakesItsEarlierSeqsStale(t *testing.T) {
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
