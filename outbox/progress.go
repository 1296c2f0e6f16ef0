// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/textmachine/outbox/db"
)

// Projected returns how far runID has been projected: every line with a seq up to it is in the sink.
// It is 0 for a run the relay has not projected.
func (s *Store) Projected(ctx context.Context, runID string) (int64, error) {
	if err := checkRunID(runID); err != nil {
		return 0, err
	}
	var p db.ProgressGetRow
	err := s.read(ctx, func(ctx context.Context) (err error) {
		p, err = s.q.ProgressGet(ctx, s.r, runID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read progress of run %q: %w", runID, err)
	}
	return p.Projected, nil
}

// lastSeq returns the highest committed seq of runID, 0 when it has none.
func (s *Store) lastSeq(ctx context.Context, runID string) (int64, error) {
	var last int64
	err := s.read(ctx, func(ctx context.Context) (err error) {
		last, err = s.q.EventsLastSeq(ctx, s.r, runID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read last seq of run %q: %w", runID, err)
	}
	return last, nil
}

// recordProjected records, in one transaction, that runID's lines up to last are in the sink: the
// progress moves to last, the once keys of the lines in toMark enter the ledger (each row then keeps
// the key and its line's digest, not the line: see LineDigest), and a stop recorded
// for the run (recordStop) goes; with forget, the rows up to last that hold no once key are deleted
// (see WithForgetProjected), after the run's highest seq is recorded. It is a relaxed
// write: losing it to power failure re-sends the batch, and loses nothing.
func (s *Store) recordProjected(ctx context.Context, runID string, last int64, toMark []ledgerMark, forget bool) error {
	return s.write(ctx, relaxed, func(w *txWriter) error {
		if err := w.setProgress(db.ProgressSetParams{EngineRunID: runID, Projected: last}); err != nil {
			return err
		}
		if err := w.clearStop(runID); err != nil {
			return err
		}
		if err := w.markProjected(runID, toMark); err != nil {
			return err
		}
		if forget {
			if err := s.forgetUpTo(w, runID, last); err != nil {
				return err
			}
		}
		if len(toMark) > 0 || forget {
			return s.giveBackPages(w)
		}
		return nil
	})
}

// RunStats describes one run's rows in the store.
type RunStats struct {
	RunID string
	// LastSeq is the highest seq the run was ever given, counting rows since forgotten: its next
	// event gets LastSeq+1.
	LastSeq     int64
	Lines       int64 // rows still stored, buffered and in the ledger
	LedgerLines int64 // rows whose once key is in the ledger
	Projected   int64 // every seq up to this one is in the sink
	// Pending is how many of the run's lines are pending, that is not yet projected (the sink does
	// not have them yet): LastSeq - Projected. The command's stats and metrics use the same word.
	Pending int64
	// OldestPending is when the first pending line (the first after Projected) was enqueued; zero
	// when nothing is pending, or when the line predates the column that records it.
	OldestPending time.Time
	// StoppedSeq is not 0 when a relay stopped projecting the run because the sink refused a batch
	// (ErrSinkRefused): it is the batch's first seq, StoppedReason the sink's error and StoppedAt when
	// it happened. The book keeps this until the run projects again, across restarts: retire the line
	// (Store.RetireEvent), or fix the sink, and the next relay or Recover goes on.
	StoppedSeq    int64
	StoppedReason string
	StoppedAt     time.Time

	storedLast int64 // the highest seq still stored: how far recovery projects
}

// runsPage is how many runs one query of AllRuns lists.
const runsPage = 512

// AllRuns yields every run that has rows, in run id order, however many there are: it lists them a
// page at a time, each page one bounded read, so it holds neither the whole list nor a read
// transaction across pages. A run's figures come from one snapshot; two runs' may come from two. It
// stops at the first error, which it yields.
func (s *Store) AllRuns(ctx context.Context) iter.Seq2[RunStats, error] {
	return func(yield func(RunStats, error) bool) {
		after := ""
		for {
			page, err := s.runsAfter(ctx, after, runsPage)
			if err != nil {
				yield(RunStats{}, err)
				return
			}
			for _, st := range page {
				if !yield(st, nil) {
					return
				}
			}
			if len(page) < runsPage {
				return
			}
			after = page[len(page)-1].RunID
		}
	}
}

// Runs describes every run that has rows, in run id order. It holds them all; AllRuns walks them in
// bounded memory.
func (s *Store) Runs(ctx context.Context) ([]RunStats, error) {
	var out []RunStats
	for st, err := range s.AllRuns(ctx) {
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// runsAfter lists at most limit runs whose id sorts after the given one, in one query.
func (s *Store) runsAfter(ctx context.Context, after string, limit int) ([]RunStats, error) {
	var rows []db.EventsRunsRow
	err := s.read(ctx, func(ctx context.Context) (err error) {
		rows, err = s.q.EventsRuns(ctx, s.r, db.EventsRunsParams{AfterRun: after, MaxRuns: int64(limit)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := make([]RunStats, len(rows))
	for i, r := range rows {
		st := RunStats{RunID: r.EngineRunID, Lines: r.Lines, LedgerLines: r.LedgerLines,
			LastSeq: max(r.LastSeq, r.ForgottenLastSeq), Projected: r.Projected, storedLast: r.LastSeq}
		st.Pending = max(st.LastSeq-st.Projected, 0)
		if r.OldestPending > 0 {
			st.OldestPending = time.UnixMilli(r.OldestPending)
		}
		if r.StoppedSeq > 0 {
			st.StoppedSeq, st.StoppedReason, st.StoppedAt = r.StoppedSeq, r.StoppedReason, time.UnixMilli(r.StoppedAt)
		}
		out[i] = st
	}
	return out, nil
}

// LedgerSize returns how many once keys the ledger holds, counted without loading them.
func (s *Store) LedgerSize(ctx context.Context) (int64, error) {
	var n int64
	err := s.read(ctx, func(ctx context.Context) (err error) {
		n, err = s.q.EventsLedgerSize(ctx, s.r)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count the ledger: %w", err)
	}
	return n, nil
}

// forgetProjected drops, in one transaction, the buffered rows of the given runs up to each one's
// projected position, after recording each run's highest seq so that no number is reused. It is
// recovery's deletion: rows whose lines the sink may lack are never touched.
func (s *Store) forgetProjected(ctx context.Context, runs []RunStats) (int64, error) {
	var n int64
	err := s.write(ctx, durable, func(w *txWriter) error {
		ctx, tx := w.ctx, w.tx
		for _, r := range runs {
			if err := s.q.ProgressKeepLastSeq(ctx, tx, db.ProgressKeepLastSeqParams{EngineRunID: r.RunID, LastSeq: r.LastSeq}); err != nil {
				return fmt.Errorf("record the last seq of run %q: %w", r.RunID, mapErr(ctx, err))
			}
			k, err := s.q.EventsForgetProjected(ctx, tx, db.EventsForgetProjectedParams{EngineRunID: r.RunID, Projected: r.Projected})
			if err != nil {
				return fmt.Errorf("forget projected lines of run %q: %w", r.RunID, mapErr(ctx, err))
			}
			n += k
		}
		return s.giveBackPages(w)
	})
	return n, err
}

// maxStopReason bounds the reason a stop record keeps: a sink's error names the line, not its bytes,
// but a record must not grow with whatever an error carries.
const maxStopReason = 4096

// recordStop records, durably, that a relay stopped projecting runID because the sink refused the
// batch that starts at seq, and why. The caller's cancellation does not reach it: the refusal is
// recorded whatever ended the call after it (the operation timeout still bounds it).
func (s *Store) recordStop(ctx context.Context, runID string, seq int64, reason string) error {
	if len(reason) > maxStopReason {
		reason = strings.ToValidUTF8(reason[:maxStopReason], "") + "…"
	}
	return s.write(context.WithoutCancel(ctx), durable, func(w *txWriter) error {
		err := s.q.StopSet(w.ctx, w.tx, db.StopSetParams{EngineRunID: runID, Seq: seq, Reason: reason, StoppedAt: time.Now().UnixMilli()})
		if err != nil {
			return fmt.Errorf("record the stop of run %q: %w", runID, mapErr(w.ctx, err))
		}
		return nil
	})
}

// forgetUpTo deletes runID's rows up to last that hold no once key, after recording last as the run's
// highest seq: the rows above it, if any, are higher still.
func (s *Store) forgetUpTo(w *txWriter, runID string, last int64) error {
	ctx, tx := w.ctx, w.tx
	if err := s.q.ProgressKeepLastSeq(ctx, tx, db.ProgressKeepLastSeqParams{EngineRunID: runID, LastSeq: last}); err != nil {
		return fmt.Errorf("record the last seq of run %q: %w", runID, mapErr(ctx, err))
	}
	if _, err := s.q.EventsForgetProjected(ctx, tx, db.EventsForgetProjectedParams{EngineRunID: runID, Projected: last}); err != nil {
		return fmt.Errorf("forget projected lines of run %q: %w", runID, mapErr(ctx, err))
	}
	return nil
}
