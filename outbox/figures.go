// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/db"
)

// lineCounts are the seqs a transaction of the store's inserted, per run, whose rows may have to be
// folded into the runs' figures (outbox_runs) once each, just before the transaction commits. The
// store's inserts are marked counted and pass the figures' insert trigger by (migrations/00007):
// updating a run's row once per line cost an enqueue a third of its time or more. Most commits fold
// nothing: the rows above the run's counted_to are its tail, which readers add (migrations/00010),
// so that a commit writes no page of the run's row. What is folded is read from the rows at that
// moment, not counted here, so that a row the transaction took out again (a caller's DELETE or
// ROLLBACK TO a savepoint inside WriteTx, a failed insert taken out) is never added. Deletes and
// ledger changes are still counted by triggers, in the same transaction.
//
// The mutex is for a WriteTx function that enqueues from several goroutines on its transaction; a
// group's calls all run on the committer's goroutine.
type lineCounts struct {
	mu   sync.Mutex
	runs map[string]int64 // the highest seq the transaction gave each run
}

// ownTx is a write transaction of the store's own, with the lines it has inserted so far.
type ownTx struct {
	tx     *sql.Tx
	counts *lineCounts
}

// add records that the transaction inserted runID's row seq.
func (c *lineCounts) add(runID string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = make(map[string]int64, 1)
	}
	c.runs[runID] = max(c.runs[runID], seq)
}

// take returns what was recorded, in run order, and starts again from nothing.
func (c *lineCounts) take() (runs []string, counts map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts, c.runs = c.runs, nil
	if len(counts) == 1 {
		for run := range counts {
			return []string{run}, counts
		}
	}
	return slices.Sorted(maps.Keys(counts)), counts
}

// addCounts folds, where it must, each run's tail into its figures (RunAddLines: a run without a
// row or a mark, or a tail that would reach its bound): one statement per run the transaction
// inserted into, which writes nothing for the others. Call it last before the commit: a transaction
// that rolls back takes it back with the rows.
func (w *txWriter) addCounts(ctx context.Context) error {
	runs, counts := w.counts.take()
	for _, run := range runs {
		p := db.RunAddLinesParams{EngineRunID: run, LastSeq: counts[run]}
		var err error
		if w.raw != nil {
			err = w.raw.exec(ctx, p)
		} else {
			err = w.q.RunAddLines(ctx, w.tx, p)
		}
		if err != nil {
			return fmt.Errorf("count the lines of run %q: %w", run, mapErr(ctx, err))
		}
	}
	if w.raw != nil {
		if err := w.raw.noteRuns(ctx, runs); err != nil {
			return fmt.Errorf("unmark the finished runs: %w", mapErr(ctx, err))
		}
	}
	return nil
}

// fold folds runID's tail into its figures whatever its length (RunFold): before a statement that may
// delete its rows, and in the relay's record, which writes the run's row anyway.
func (w *txWriter) fold(runID string) error {
	if err := w.q.RunFold(w.ctx, w.on(stmtFold), runID); err != nil {
		return fmt.Errorf("fold the figures of run %q: %w", runID, mapErr(w.ctx, err))
	}
	return nil
}

// rawAddLines runs RunAddLines on the writer connection through the driver's own statement API, in
// the transaction database/sql holds open on it: every enqueue commit runs it, and through
// database/sql a statement costs some microseconds of conversions, more than SQLite's work here
// (measured: one event per transaction at NORMAL, 24,000/s through database/sql, 37,000/s through
// the driver's API). The SQL is still sqlc's. Only the goroutine that
// holds the writer connection in a transaction of the store's uses it.
type rawAddLines struct {
	conn *sqlite3.Conn
	stmt *sqlite3.Stmt

	// A run stays in the index of the runs recovery visits once it is finished, until something
	// unmarks it (migrations/00008): recovery at a start, and here, the store itself once it has
	// enqueued to sweepEvery runs since it last swept, a number that doubles at every sweep. An engine
	// that enqueues to a run or a few never sweeps; a process that makes thousands of runs leaves at
	// most about as many marked as it made since its last sweep, so that neither the index nor a walk
	// of it (OpenRuns: recovery, a metrics scrape) grows with the runs before, and the sweeps cost it
	// about two reads of each of its runs' rows in all.
	since      map[string]struct{}
	sweepEvery int
}

// firstSweep is how many runs the store enqueues to before it first unmarks the finished ones.
const firstSweep = 64

// noteRuns notes the runs a transaction enqueued to and, when they make sweepEvery since the last
// sweep, unmarks the finished runs in the same transaction (RunsCloseFinished tests each run it
// unmarks, so it may run anywhere in a transaction; rolled back, it is done again later).
func (r *rawAddLines) noteRuns(ctx context.Context, runs []string) error {
	if r.since == nil {
		r.since = map[string]struct{}{}
		r.sweepEvery = firstSweep
	}
	for _, run := range runs {
		r.since[run] = struct{}{}
	}
	if len(r.since) < r.sweepEvery {
		return nil
	}
	old := r.conn.SetInterrupt(ctx)
	defer r.conn.SetInterrupt(old)
	if err := r.conn.Exec(db.RunsCloseFinished); err != nil {
		return err
	}
	clear(r.since)
	r.sweepEvery *= 2
	return nil
}

func (r *rawAddLines) exec(ctx context.Context, p db.RunAddLinesParams) error {
	if r.stmt == nil {
		stmt, _, err := r.conn.Prepare(db.RunAddLines)
		if err != nil {
			return err
		}
		if n := stmt.BindCount(); n != 2 {
			stmt.Close()
			return fmt.Errorf("outbox: the figures' fold has %d parameters, the store binds 2", n)
		}
		r.stmt = stmt
	}
	old := r.conn.SetInterrupt(ctx)
	defer r.conn.SetInterrupt(old)
	// Bound by the numbers the SQL gives its parameters (?1 run, ?2 the transaction's last seq of it).
	err := errors.Join(r.stmt.BindText(1, p.EngineRunID), r.stmt.BindInt64(2, p.LastSeq))
	if err != nil {
		return err
	}
	return r.stmt.Exec()
}

// close finalizes the statement; the store calls it before it closes the writer connection.
func (r *rawAddLines) close() error {
	if r == nil || r.stmt == nil {
		return nil
	}
	err := r.stmt.Close()
	r.stmt = nil
	return err
}

// closeFinishedRuns takes the runs recovery finds finished out of the index of the runs it visits
// (migrations/00008): marked runs with nothing left to project or forget. A run's mark is set in the
// statement that makes it need recovery and left alone by every later enqueue to it, so that an enqueue
// commit writes no page of the index; clearing it is recovery's, at its end. One statement, which tests
// what it clears, so no crash between recovery's steps can unmark a run that needs it. Its loss on a
// power failure costs the next start a visit, nothing else.
func (s *Store) closeFinishedRuns(ctx context.Context) (int64, error) {
	var n int64
	err := s.write(ctx, relaxed, func(w *txWriter) (err error) {
		n, err = s.q.RunsCloseFinished(w.ctx, w.tx)
		if err != nil {
			return fmt.Errorf("unmark the finished runs: %w", mapErr(w.ctx, err))
		}
		return nil
	})
	return n, err
}
