// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"math"
	"strings"
	"time"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/faultpoint"
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
// (see WithForgetProjected and forgetUpTo; lines is how many lines the record covers), after the
// run's highest seq is recorded. It is a relaxed write: losing it to power failure re-sends the
// batch, and loses nothing.
func (s *Store) recordProjected(ctx context.Context, runID string, last int64, toMark []ledgerMark, forget bool, lines int) error {
	return s.write(ctx, relaxed, func(w *txWriter) error {
		// The record writes the run's row anyway: its tail goes into it here, so that the tail of a
		// run a relay follows stays a batch or so, and forgetting below deletes no row of it.
		if err := w.fold(runID); err != nil {
			return err
		}
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
			if err := s.forgetUpTo(w, runID, last, lines); err != nil {
				return err
			}
		}
		if len(toMark) > 0 || forget {
			return s.giveBackPages(w)
		}
		return nil
	})
}

// RunStats describes one run's rows in the store. Every figure is read from the run's row of per-run
// figures (migrations/00005) with its tail, the lines enqueued since the row was last brought up to
// date (migrations/00010): exact at every commit.
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
	// EnqueuedTotal and ProjectedTotal count the lines ever enqueued to the run and ever projected
	// from it. They survive restarts and forgetting and never go down: counters, for an exporter's
	// outbox_lines_enqueued_total and outbox_lines_projected_total. A run's seqs are dense from 1, so
	// they equal LastSeq and Projected.
	EnqueuedTotal  int64
	ProjectedTotal int64
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
	forgotten  int64 // every row up to this seq without a once key is gone
}

// runsPage is how many runs one query of AllRuns lists.
const runsPage = 512

// AllRuns yields every run that has rows, in run id order, however many there are: it lists them a
// page at a time, each page one bounded read of a row per run (never of the run's stored lines), so
// it holds neither the whole list nor a read transaction across pages. A run's figures come from one
// snapshot; two runs' may come from two. It stops at the first error, which it yields.
func (s *Store) AllRuns(ctx context.Context) iter.Seq2[RunStats, error] {
	return s.runsPages(ctx, 1)
}

// EveryRun yields, like AllRuns, every run the book ever held, those whose rows are all forgotten
// too (with Lines 0): what a check of the book's positions against a journal needs. The book keeps a
// small row per run for its life, so it walks as many rows as the engine had starts.
func (s *Store) EveryRun(ctx context.Context) iter.Seq2[RunStats, error] {
	return s.runsPages(ctx, 0)
}

func (s *Store) runsPages(ctx context.Context, minLines int64) iter.Seq2[RunStats, error] {
	return s.pages(ctx, func(ctx context.Context, after string) ([]RunStats, error) {
		rows, err := s.q.RunsPage(ctx, s.r, db.RunsPageParams{AfterRun: after, MinLines: minLines, MaxRuns: runsPage})
		if err != nil {
			return nil, err
		}
		out := make([]RunStats, len(rows))
		for i, r := range rows {
			out[i] = runStats(r.EngineRunID, r.LastSeq, r.Projected, r.Forgotten, r.Lines, r.LedgerLines, 0,
				r.OldestPending, r.StoppedSeq, r.StoppedReason, r.StoppedAt)
		}
		return out, nil
	})
}

// OpenRuns yields, like AllRuns, the runs that can need work: rows stored and either lines pending (a
// run a relay stopped on has those) or projected rows not yet forgotten. It walks an index that holds
// only these, so it costs nothing for the finished runs however many there are: Recover visits these
// runs, and metrics name them.
func (s *Store) OpenRuns(ctx context.Context) iter.Seq2[RunStats, error] {
	return s.pages(ctx, s.openRunsAfter)
}

func (s *Store) openRunsAfter(ctx context.Context, after string) ([]RunStats, error) {
	rows, err := s.q.RunsOpenPage(ctx, s.r, db.RunsOpenPageParams{AfterRun: after, MaxRuns: runsPage})
	if err != nil {
		return nil, err
	}
	out := make([]RunStats, len(rows))
	for i, r := range rows {
		out[i] = runStats(r.EngineRunID, r.LastSeq, r.Projected, r.Forgotten, r.Lines, r.LedgerLines, r.StoredLast,
			r.OldestPending, r.StoppedSeq, r.StoppedReason, r.StoppedAt)
	}
	return out, nil
}

func runStats(runID string, last, projected, forgotten, lines, ledger, storedLast, oldest, stoppedSeq int64, reason string, stoppedAt int64) RunStats {
	st := RunStats{RunID: runID, LastSeq: last, Lines: lines, LedgerLines: ledger, Projected: projected,
		Pending: max(last-projected, 0), EnqueuedTotal: last, ProjectedTotal: projected,
		storedLast: storedLast, forgotten: forgotten}
	if oldest > 0 && st.Pending > 0 {
		st.OldestPending = time.UnixMilli(oldest)
	}
	if stoppedSeq > 0 {
		st.StoppedSeq, st.StoppedReason, st.StoppedAt = stoppedSeq, reason, time.UnixMilli(stoppedAt)
	}
	return st
}

// pages walks the pages page returns, each after the last run id of the one before, each one read.
func (s *Store) pages(ctx context.Context, page func(ctx context.Context, after string) ([]RunStats, error)) iter.Seq2[RunStats, error] {
	return func(yield func(RunStats, error) bool) {
		after := ""
		for {
			var runs []RunStats
			err := s.read(ctx, func(ctx context.Context) (err error) {
				runs, err = page(ctx, after)
				return err
			})
			if err != nil {
				yield(RunStats{}, fmt.Errorf("list runs: %w", err))
				return
			}
			for _, st := range runs {
				if !yield(st, nil) {
					return
				}
			}
			if len(runs) < runsPage {
				return
			}
			after = runs[len(runs)-1].RunID
		}
	}
}

// BookTotals are the book's figures over every run it ever held, read from the per-run figures in
// one pass over a row per run.
type BookTotals struct {
	Runs         int64 // every run the book ever held, its rows forgotten or not
	RunsWithRows int64 // the runs AllRuns lists
	StoppedRuns  int64 // runs a relay stopped on the sink's refusal (RunStats.StoppedSeq)
	Lines        int64 // rows stored
	LedgerKeys   int64 // once keys in the ledger
	Pending      int64 // lines not yet projected
	// EnqueuedTotal and ProjectedTotal count every line ever enqueued and ever projected: counters
	// that never go down, for outbox_lines_enqueued_total and outbox_lines_projected_total.
	EnqueuedTotal  int64
	ProjectedTotal int64
}

// Totals returns the book's figures over all its runs.
func (s *Store) Totals(ctx context.Context) (BookTotals, error) {
	var t db.RunsTotalsRow
	err := s.read(ctx, func(ctx context.Context) (err error) {
		t, err = s.q.RunsTotals(ctx, s.r)
		return err
	})
	if err != nil {
		return BookTotals{}, fmt.Errorf("read the book's totals: %w", err)
	}
	return BookTotals{Runs: t.Runs, RunsWithRows: t.RunsWithLines, StoppedRuns: t.StoppedRuns, Lines: t.Lines,
		LedgerKeys: t.LedgerLines, Pending: t.Pending, EnqueuedTotal: t.Enqueued, ProjectedTotal: t.Projected}, nil
}

// LedgerSize returns how many once keys the ledger holds, read from the per-run figures: its cost
// grows with the runs the book has held, not with its keys.
func (s *Store) LedgerSize(ctx context.Context) (int64, error) {
	var n int64
	err := s.read(ctx, func(ctx context.Context) (err error) {
		n, err = s.q.RunsLedgerSize(ctx, s.r)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count the ledger: %w", err)
	}
	return n, nil
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

// forgetStep bounds the rows one transaction of forgetting deletes: a few thousand rows put a few MiB
// in the WAL and hold the writer for milliseconds, where one transaction over millions of rows put a
// gigabyte in the WAL and outlasted the operation timeout.
const forgetStep = 4096

// forgetUpTo, in the relay's record of a batch, deletes runID's rows up to last that hold no once key
// and records that they are gone, after recording the run's highest seq so that no number is reused.
// It deletes from where the run was forgotten up to; a run whose rows are forgotten further behind
// (a run kept unforgotten by an earlier process, and drained now) is left to forgetRun's bounded
// steps, so that a record never deletes more than a step, or than the batches it records (lines) when
// a sink takes batches larger than a step.
func (s *Store) forgetUpTo(w *txWriter, runID string, last int64, lines int) error {
	ctx := w.ctx
	r, err := s.q.RunGet(ctx, w.on(stmtRunGet), runID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("read the figures of run %q: %w", runID, mapErr(ctx, err))
	case r.Forgotten >= last || last-r.Forgotten > max(forgetStep, 2*int64(lines)):
		return nil
	}
	return s.forgetRange(w, runID, r.Forgotten, last, max(r.LastSeq, last))
}

// forgetRange deletes runID's rows after from and up to upTo that hold no once key, and records
// them forgotten, with lastSeq recorded first as the run's highest seq (migrations/00003: what a book
// migrated down numbers on from).
func (s *Store) forgetRange(w *txWriter, runID string, from, upTo, lastSeq int64) error {
	ctx := w.ctx
	if err := s.q.ProgressKeepLastSeq(ctx, w.on(stmtKeepLastSeq), db.ProgressKeepLastSeqParams{EngineRunID: runID, LastSeq: lastSeq}); err != nil {
		return fmt.Errorf("record the last seq of run %q: %w", runID, mapErr(ctx, err))
	}
	if _, err := s.q.EventsForgetRange(ctx, w.on(stmtForgetRange), db.EventsForgetRangeParams{EngineRunID: runID, AfterSeq: from, UpTo: upTo}); err != nil {
		return fmt.Errorf("forget projected lines of run %q: %w", runID, mapErr(ctx, err))
	}
	if err := s.q.RunSetForgotten(ctx, w.on(stmtSetForgotten), db.RunSetForgottenParams{EngineRunID: runID, Seq: upTo}); err != nil {
		return fmt.Errorf("record the forgotten lines of run %q: %w", runID, mapErr(ctx, err))
	}
	return nil
}

// forgetRun forgets runID's projected rows that hold no once key, forgetStep seqs a transaction, each
// step recording how far it got: a crash or an ended ctx between steps leaves the rows after that
// point for the next call, and never a line the sink lacks (only rows up to the projected position go).
// With unprojected, it then deletes the rows after the projected position too (ForgetEvents), from
// the highest down, so that what a step leaves of them still follows the projected position without
// a hole (ErrRowsMissing) and a later Recover projects it as it is. Between steps it gives way to the
// engine's writers, and it returns when ctx ends, with what the steps so far committed kept. It
// returns how many rows it deleted.
func (s *Store) forgetRun(ctx context.Context, runID string, unprojected bool) (int64, error) {
	var n int64
	below := int64(math.MaxInt64) // the unprojected rows above this seq are gone
	// Recover's steps may be lost to a power failure at no cost but doing them again; ForgetEvents
	// tells its caller what is gone, so each of its steps waits for its commit to be durable.
	mode := relaxed
	if unprojected {
		mode = durable
	}
	for {
		var done bool
		began := time.Now()
		err := s.write(ctx, mode, func(w *txWriter) error {
			// Its rows are deleted below: a row of its tail deleted before it is folded would take
			// its seq out of the run's last_seq when it is the highest.
			if err := w.fold(runID); err != nil {
				return err
			}
			r, err := s.q.RunGet(w.ctx, w.tx, runID)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				done = true
				return nil
			case err != nil:
				return fmt.Errorf("read the figures of run %q: %w", runID, mapErr(w.ctx, err))
			}
			before := r.Lines
			switch {
			case r.Forgotten < r.Projected:
				upTo := min(r.Projected, r.Forgotten+forgetStep)
				if err := s.forgetRange(w, runID, r.Forgotten, upTo, r.LastSeq); err != nil {
					return err
				}
				done = upTo >= r.Projected && !unprojected
			case unprojected:
				stored, err := s.q.EventsLastSeq(w.ctx, w.tx, runID)
				if err != nil {
					return fmt.Errorf("read the last stored seq of run %q: %w", runID, mapErr(w.ctx, err))
				}
				hi := min(stored, below)
				if hi <= r.Projected {
					done = true
					return nil
				}
				lo := max(r.Projected, hi-forgetStep)
				if err := s.q.ProgressKeepLastSeq(w.ctx, w.tx, db.ProgressKeepLastSeqParams{EngineRunID: runID, LastSeq: r.LastSeq}); err != nil {
					return fmt.Errorf("record the last seq of run %q: %w", runID, mapErr(w.ctx, err))
				}
				if _, err := s.q.EventsForgetRange(w.ctx, w.tx, db.EventsForgetRangeParams{EngineRunID: runID, AfterSeq: lo, UpTo: hi}); err != nil {
					return fmt.Errorf("forget unprojected lines of run %q: %w", runID, mapErr(w.ctx, err))
				}
				below = lo
				done = lo <= r.Projected
			default:
				done = true
				return nil
			}
			after, err := s.q.RunGet(w.ctx, w.tx, runID)
			if err != nil {
				return fmt.Errorf("read the figures of run %q: %w", runID, mapErr(w.ctx, err))
			}
			n += before - after.Lines
			return s.giveBackPages(w)
		})
		if err != nil {
			return n, err
		}
		faultpoint.Hit(faultpoint.ForgetStep)
		if done {
			return n, nil
		}
		// The writer is free between steps; a short pause lets a writer that arrives just after a
		// step in before the next, so that an engine's enqueues wait for at most a step.
		pause := time.NewTimer(min(time.Since(began)/4, 20*time.Millisecond))
		select {
		case <-ctx.Done():
			pause.Stop()
			return n, ctx.Err()
		case <-pause.C:
		}
	}
}
