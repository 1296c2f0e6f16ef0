// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"testing"

	"github.com/textmachine/outbox/inbox"
)

func TestAttackARepeatWithinOneCallIsADuplicateOrAConflictAsAcrossCalls(t *testing.T) {
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
