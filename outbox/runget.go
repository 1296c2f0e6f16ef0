// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/textmachine/outbox/db"
)

// Run returns one run's figures, from its row of per-run figures (a key look-up), whether or not
// it still has rows: for a run the book never held, a RunStats of zeros but its id. It does not
// read the run's stored lines, so OldestPending and the stop (StoppedSeq and the rest) are left zero:
// OpenRuns lists a run with lines pending with both, and a stopped run always has lines pending.
func (s *Store) Run(ctx context.Context, runID string) (RunStats, error) {
	if err := checkRunID(runID); err != nil {
		return RunStats{}, err
	}
	var r db.RunGetRow
	err := s.read(ctx, func(ctx context.Context) (err error) {
		r, err = s.q.RunGet(ctx, s.r, runID)
		if errors.Is(err, sql.ErrNoRows) {
			r, err = db.RunGetRow{}, nil
		}
		return err
	})
	if err != nil {
		return RunStats{}, fmt.Errorf("read the figures of run %q: %w", runID, err)
	}
	return runStats(runID, r.LastSeq, r.Projected, r.Forgotten, r.Lines, r.LedgerLines, 0, 0, 0, "", 0), nil
}
