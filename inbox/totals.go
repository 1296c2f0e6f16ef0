// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"fmt"

	"github.com/textmachine/outbox/inbox/internal/db"
)

// Totals counts what the inbox has done with every line it was given since the database took the
// counts (inbox schema version 4), each line in the field its call's Report counted it in. The
// counts are kept in the database and added to in the transaction that applies the lines, so they
// survive restarts, never go down, and a call that fails (nothing of it committed) counts nothing:
// the counters an exporter reads as outbox_inbox_lines_applied_total and the others.
type Totals struct {
	Applied     int64 // lines whose handler ran and committed
	Duplicates  int64 // lines re-delivered with the bytes that were applied
	Stale       int64 // lines older than the digest window, not applied
	Quarantined int64 // lines not applied because their run is quarantined
}

// countersVersion is the inbox schema version that keeps the counts.
const countersVersion = 4

// Totals returns the counts of lines the inbox has applied, found duplicate or stale, and left
// quarantined. It reads one row, on the read pool: it never waits for a running Apply, and costs the
// same whatever the runs and lines.
func (in *Inbox) Totals(ctx context.Context) (Totals, error) {
	if in.uncounted {
		return Totals{}, ErrNoTotals
	}
	var r db.CountersGetRow
	err := in.read(ctx, func() (err error) {
		r, err = in.q.CountersGet(ctx, in.r)
		return err
	})
	if err != nil {
		return Totals{}, wrapf(err, "read the counts")
	}
	return Totals{Applied: r.Applied, Duplicates: r.Duplicates, Stale: r.Stale, Quarantined: r.Quarantined}, nil
}

// count adds a call's outcome to the counts, in the call's transaction.
func (t *txn) count(rep Report) error {
	if rep == (Report{}) {
		return nil
	}
	err := t.in.q.CountersAdd(t.ctx, t.on(stmtCountersAdd), db.CountersAddParams{
		Applied: int64(rep.Applied), Duplicates: int64(rep.Duplicates),
		Stale: int64(rep.Stale), Quarantined: int64(rep.Quarantined),
	})
	if err != nil {
		return fmt.Errorf("inbox: store the counts: %w", err)
	}
	return nil
}
