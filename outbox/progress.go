package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/textmachine/outbox/db"
)

// Projected returns how far runID has been projected: every line with a seq up to it is in the sink.
// It is 0 for a run the relay has not projected, or whose rows ForgetEvents has removed.
func (s *Store) Projected(ctx context.Context, runID string) (int64, error) {
	if runID == "" {
		return 0, ErrEmptyRunID
	}
	var p int64
	err := s.read(ctx, func(ctx context.Context) (err error) {
		p, err = s.q.ProgressGet(ctx, s.r, runID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: read progress of run %q: %w", runID, err)
	}
	return p, nil
}

// lastSeq returns the highest committed seq of runID, 0 when it has none.
func (s *Store) lastSeq(ctx context.Context, runID string) (int64, error) {
	var last int64
	err := s.read(ctx, func(ctx context.Context) (err error) {
		last, err = s.q.EventsLastSeq(ctx, s.r, runID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: read last seq of run %q: %w", runID, err)
	}
	return last, nil
}

// recordProjected records, in one transaction, that runID's lines up to last are in the sink: the
// progress moves to last and the once keys of the lines in toMark enter the ledger. It is a relaxed
// write (see writeRelaxed): losing it to power failure re-sends the batch, and loses nothing.
func (s *Store) recordProjected(ctx context.Context, runID string, last int64, toMark []int64) error {
	return s.writeRelaxed(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The statements are sqlc's (db.ProgressSet, db.EventMarkProjected), prepared once.
		if _, err := tx.StmtContext(ctx, s.group.progressSet).ExecContext(ctx, runID, last); err != nil {
			return fmt.Errorf("outbox: record progress of run %q: %w", runID, mapErr(ctx, err))
		}
		if len(toMark) == 0 {
			return nil
		}
		mark := tx.StmtContext(ctx, s.group.markProjected)
		for _, seq := range toMark {
			if _, err := mark.ExecContext(ctx, runID, seq); err != nil {
				return fmt.Errorf("outbox: mark line %d of run %q announced: %w", seq, runID, mapErr(ctx, err))
			}
		}
		return nil
	})
}

// RunStats describes one run's rows in the store.
type RunStats struct {
	RunID       string
	Lines       int64 // rows stored, buffered and in the ledger
	LedgerLines int64 // rows whose once key is in the ledger
	LastSeq     int64 // highest seq stored
	Projected   int64 // every seq up to this one is in the sink
	// OldestPending is when the first line after Projected was enqueued; zero when nothing is
	// pending, or when the line predates the column that records it.
	OldestPending time.Time
}

// maxRuns bounds Runs. ForgetEvents keeps a book to its current run plus the ledger's runs, so a
// database with more runs than this has not been recovered in a very long time.
const maxRuns = 100_000

// Runs describes every run that has rows, in run id order.
func (s *Store) Runs(ctx context.Context) ([]RunStats, error) {
	var out []RunStats
	err := s.read(ctx, func(ctx context.Context) error {
		// One read transaction, so that every figure comes from the same snapshot.
		tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		rows, err := s.q.EventsRuns(ctx, tx, maxRuns)
		if err != nil {
			return err
		}
		for _, r := range rows {
			st := RunStats{RunID: r.EngineRunID, Lines: r.Lines, LedgerLines: r.LedgerLines, LastSeq: r.LastSeq}
			if st.Projected, err = s.q.ProgressGet(ctx, tx, r.EngineRunID); err != nil {
				return err
			}
			if st.Projected < st.LastSeq {
				ms, err := s.q.EventsOldestAfter(ctx, tx, db.EventsOldestAfterParams{EngineRunID: r.EngineRunID, AfterSeq: st.Projected})
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				if ms > 0 {
					st.OldestPending = time.UnixMilli(ms)
				}
			}
			out = append(out, st)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: list runs: %w", err)
	}
	return out, nil
}
