// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

// TestDigestWindow gathers how the window of digests kept per run decides between a duplicate, a
// conflict and a stale line, exactly at its edge and when it is lowered or raised across a reopen.
func TestDigestWindow(t *testing.T) {
	t.Run("TheWindowsEdgeIsExactWhateverTheRowBoundary", theWindowsEdgeIsExactWhateverTheRowBoundary)
	t.Run("WindowLoweredAcrossReopenMakesOlderSeqsStaleNotDuplicates", windowLoweredAcrossReopenMakesOlderSeqsStaleNotDuplicates)
	t.Run("AWindowLoweredAcrossReopenDropsTheOlderDigestsWithinSixteenLines", aWindowLoweredAcrossReopenDropsTheOlderDigestsWithinSixteenLines)
	t.Run("LoweringTheWindowAcrossAReopenLeavesNoRowsPastIt", loweringTheWindowAcrossAReopenLeavesNoRowsPastIt)
	t.Run("WindowRaisedAcrossReopenNeverTakesADroppedDigestForAConflict", windowRaisedAcrossReopenNeverTakesADroppedDigestForAConflict)
	t.Run("ADigestMissingInsideTheWindowIsStale", aDigestMissingInsideTheWindowIsStale)
}

func theWindowsEdgeIsExactWhateverTheRowBoundary(t *testing.T) {
	for _, w := range []int{1, 2, 15, 16, 17, 31, 33} {
		for _, reopened := range []bool{false, true} {
			t.Run(fmt.Sprintf("window %d reopened %v", w, reopened), func(t *testing.T) {
				opt := inbox.WithDigestWindow(w)
				if reopened {
					opt = inbox.WithDigestWindow(64)
				}
				in, path := setup(t, opt)
				const hwm = 100
				mustApply(t, in, lines("r", 1, hwm))
				if reopened {
					in = reopen(t, in, path, inbox.WithDigestWindow(w))
				}
				for seq := int64(1); seq <= hwm; seq++ {
					inWindow := seq > hwm-int64(w)
					want := inbox.Report{Stale: 1}
					if inWindow {
						want = inbox.Report{Duplicates: 1}
					}
					if rep := applyOne(t, in, line("r", seq)); rep != want {
						t.Fatalf("seq %d: %+v, want %+v", seq, rep, want)
					}
					if inWindow {
						continue // other bytes there are a conflict, tested elsewhere
					}
					if rep := applyOne(t, in, line("r", seq, "other")); rep != (inbox.Report{Stale: 1}) {
						t.Fatalf("seq %d other bytes: %+v, want Stale", seq, rep)
					}
				}
				if rep := applyOne(t, in, line("r", hwm-int64(w)+1, "other")); rep != (inbox.Report{Quarantined: 1}) {
					t.Fatalf("oldest seq in the window, other bytes: %+v, want a conflict", rep)
				}
			})
		}
	}
}

func windowLoweredAcrossReopenMakesOlderSeqsStaleNotDuplicates(t *testing.T) {
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

func aWindowLoweredAcrossReopenDropsTheOlderDigestsWithinSixteenLines(t *testing.T) {
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 200))
	in = reopen(t, in, path, inbox.WithDigestWindow(4))
	mustApply(t, in, lines("r", 201, 216))
	if n := digestsKept(t, rawDB(t, path), "r"); n > 4+15 {
		t.Fatalf("%d digests kept after 16 lines under a window of 4", n)
	}
}

func loweringTheWindowAcrossAReopenLeavesNoRowsPastIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 1000))
	in.Close()
	in, err := inbox.Open(ctx, path, inbox.WithDigestWindow(32))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	d := rawDB(t, path)
	// Inside the new window, what was kept is still compared.
	if rep := mustApply(t, in, lines("r", 990, 1000)); rep != (inbox.Report{Duplicates: 11}) {
		t.Errorf("%+v", rep)
	}
	if rep := mustApply(t, in, lines("r", 1, 968)); rep != (inbox.Report{Stale: 968}) {
		t.Errorf("older than the window: %+v", rep)
	}
	for s := int64(1001); s <= 1040; s++ {
		mustApply(t, in, lines("r", s, s))
		// 32 digests in rows of 16, and at most one row more while the window's lowest row moves.
		if n := count(t, d, `SELECT count(*) FROM inbox_digests`); n > 3 && s > 1016 {
			t.Fatalf("after seq %d: %d rows of digests for a window of 32", s, n)
		}
	}
	if n := digestsKept(t, d, "r"); n > 48 {
		t.Errorf("%d digests kept for a window of 32", n)
	}
}

func windowRaisedAcrossReopenNeverTakesADroppedDigestForAConflict(t *testing.T) {
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

func aDigestMissingInsideTheWindowIsStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t, inbox.WithDigestWindow(4))
	mustApply(t, in, lines("r", 1, 100))
	in.Close()
	// The window raised across a reopen: seqs 37..100 are inside it now. The digests of 97..100 are
	// kept (the row of 97..112); those of 37..96 were dropped with the rows that left the old window.
	in, err := inbox.Open(ctx, path, inbox.WithDigestWindow(64))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if rep := mustApply(t, in, append(lines("r", 37, 100), line("r", 50, "other"))); rep != (inbox.Report{Stale: 61, Duplicates: 4}) {
		t.Errorf("%+v", rep)
	}
	if qs := quarantined(t, in); len(qs) != 0 {
		t.Errorf("quarantined %v", qs)
	}
	// A digest kept is still compared: other bytes at seq 98 are a conflict.
	mustApply(t, in, [][]byte{line("r", 98, "other")})
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Reason != "conflict" {
		t.Errorf("quarantined %v", qs)
	}
}
