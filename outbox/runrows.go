// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"fmt"
)

// EventsUsed reports whether runID has ever been used in this book: it has a row, buffered or in the
// ledger, or was projected, or its rows were forgotten. A run id is a stream identity and must be
// fresh: a process that reused one would continue the earlier stream's numbers.
func (s *Store) EventsUsed(ctx context.Context, runID string) (bool, error) {
	if err := checkRunID(runID); err != nil {
		return false, err
	}
	var used int64
	err := s.read(ctx, func(ctx context.Context) (err error) {
		used, err = s.q.EventsRunUsed(ctx, s.r, runID)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("check run %q: %w", runID, err)
	}
	return used != 0, nil
}

// ForgetEvents deletes the buffered rows of every run except runID and returns how many it deleted.
// Ledger rows (announced once keys) are kept, whatever their run, and so is every row of runID. Rows
// are deleted whether or not they were projected, including rows of runs this store is enqueueing to:
// it is the explicit primitive. Relay.Recover is the safe form, which deletes only projected rows of
// earlier runs. Either way no run ever reuses a number: each run's highest seq is recorded before its
// rows go, and its next seq follows it; and a run's projection progress is kept, so its ledger rows
// are never re-sent.
//
// It deletes in bounded steps, a transaction each, as Recover does, so that a large book neither
// outlasts the operation timeout nor fills the WAL. A failure or an ended ctx midway returns the error
// with the rows the steps so far deleted (and counted) gone; a later ForgetEvents, or Recover for the
// projected rows, goes on from there. No step leaves a run's stored rows with a hole after its
// projected position, which a relay would refuse (ErrRowsMissing): a run's projected rows go from
// the oldest up, its unprojected rows from the newest down.
func (s *Store) ForgetEvents(ctx context.Context, runID string) (forgotten int64, err error) {
	if err := checkRunID(runID); err != nil {
		return 0, err
	}
	// Refused up front, and waiting for the writer within ctx, as any write is, also when no run
	// has a row to forget: an empty transaction takes the same way in as every step.
	if err := s.write(ctx, durable, func(*txWriter) error { return nil }); err != nil {
		return 0, err
	}
	for run, err := range s.OpenRuns(ctx) {
		if err != nil {
			return forgotten, fmt.Errorf("forget other runs: %w", err)
		}
		if run.RunID == runID {
			continue
		}
		n, err := s.forgetRun(ctx, run.RunID, true)
		forgotten += n
		if err != nil {
			return forgotten, fmt.Errorf("forget the rows of run %q: %w", run.RunID, err)
		}
	}
	return forgotten, nil
}
