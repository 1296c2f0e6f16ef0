// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestAttackTheWindowsEdgeIsExactWhateverTheRowBoundary(t *testing.T) {
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

func TestAttackAWindowLoweredAcrossReopenDropsTheOlderDigestsWithinSixteenLines(t *testing.T) {
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 200))
	in = reopen(t, in, path, inbox.WithDigestWindow(4))
	mustApply(t, in, lines("r", 201, 216))
	if n := digestsKept(t, rawDB(t, path), "r"); n > 4+15 {
		t.Fatalf("%d digests kept after 16 lines under a window of 4", n)
	}
}

func TestAttackAnIdleRunKeepsOnlyItsLastDigestOnceTrimmed(t *testing.T) {
	in, path := setup(t, inbox.WithDigestRetention(time.Millisecond))
	mustApply(t, in, lines("r", 1, 50))
	time.Sleep(10 * time.Millisecond)
	for i := 0; i < 3; i++ {
		mustApply(t, in, lines(fmt.Sprintf("o%d", i), 1, 1))
	}
	if n := digestsKept(t, rawDB(t, path), "r"); n != 1 {
		t.Fatalf("%d digests kept for the idle run", n)
	}
	if rep := applyOne(t, in, line("r", 50)); rep != (inbox.Report{Duplicates: 1}) {
		t.Fatalf("%+v", rep)
	}
	// the run wakes up and its window fills again from its mark (no call after it to trim it)
	mustApply(t, in, lines("r", 51, 60))
	if n := digestsKept(t, rawDB(t, path), "r"); n != 11 {
		t.Fatalf("%d digests kept after the run woke up, want 50..60", n)
	}
}
