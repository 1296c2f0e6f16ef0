// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

func TestWindowLoweredAcrossReopenMakesOlderSeqsStaleNotDuplicates(t *testing.T) {
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

func TestWindowRaisedAcrossReopenNeverTakesADroppedDigestForAConflict(t *testing.T) {
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

func TestTheWindowsEdgeIsExactWhateverTheRowBoundary(t *testing.T) {
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

func TestAWindowLoweredAcrossReopenDropsTheOlderDigestsWithinSixteenLines(t *testing.T) {
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 200))
	in = reopen(t, in, path, inbox.WithDigestWindow(4))
	mustApply(t, in, lines("r", 201, 216))
	if n := digestsKept(t, rawDB(t, path), "r"); n > 4+15 {
		t.Fatalf("%d digests kept after 16 lines under a window of 4", n)
	}
}
