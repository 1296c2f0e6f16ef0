// SPDX-License-Identifier: Apache-2.0

package outbox

import "testing"

// TestACommitRecordedLateDoesNotMoveWrittenBack: database/sql hands the writer connection to the next
// transaction inside Tx.Commit, so a later commit can be recorded before an earlier one's record
// runs. Written must stay at the later ticket, or the caller waiting for it waits forever.
func TestACommitRecordedLateDoesNotMoveWrittenBack(t *testing.T) {
	d := newDurability()
	var later ticket
	earlier, err := d.commit(0, func() error {
		// The next transaction commits, and is recorded, while this COMMIT is still returning.
		var err error
		later, err = d.commit(0, func() error { return nil })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if earlier.n >= later.n {
		t.Fatalf("tickets %d then %d, want increasing", earlier.n, later.n)
	}
	if got := d.written.Load(); got != later.n {
		t.Fatalf("written = %d after both commits returned, want the later ticket %d", got, later.n)
	}
}
