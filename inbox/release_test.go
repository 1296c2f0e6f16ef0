// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
