// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/db"
)

// RunLister is an optional interface of a Sink that can list the runs it holds, each with its
// highest seq, without reading its history (journal.Journal and journal.File do, from their run
// index). A relay whose sink is a RunLister compares the list with the book at its first call (see
// ErrBookBehind).
type RunLister interface {
	SinkRuns(ctx context.Context) ([]SinkRun, error)
}

// SinceLister is an optional interface of a RunLister that can list only the runs with lines after
// a mark it gave before: a relay whose sink is one keeps the sink's end (the mark) in the book at a
// book check that passes, and its next start compares only the runs the sink holds lines of after it.
//
// SinkRunsSince returns the runs with lines after mark (every run the sink holds for a nil mark),
// each with its highest seq, and the mark of the sink's end as it listed them. A run listed may have
// lines before the mark too; a run with none after it need not be listed. It returns ErrMarkUnknown
// when it cannot prove the mark is one of its own, at a place it still holds (another sink's, a
// restored older copy of the sink, a place retention deleted): the relay then compares every run.
type SinceLister interface {
	RunLister
	SinkRunsSince(ctx context.Context, mark []byte) (runs []SinkRun, end []byte, err error)
}

// SinkRun is one run a sink holds: its id and the highest seq of its lines there.
type SinkRun struct {
	RunID   string
	LastSeq int64
}

// WithBookCheck turns the comparison of the book with a RunLister sink at the relay's first call on
// (the default) or off. Turn it off only for a sink that other books' relays append to too, whose
// runs this book cannot know of.
func WithBookCheck(on bool) RelayOption {
	return func(c *relayConfig) error {
		c.noBookCheck = !on
		return nil
	}
}

// BookLack is one run a sink holds further than the book knows: the sink's highest seq, and the
// highest the book recorded for the run (0, with Known false, for a run the book never held).
type BookLack struct {
	RunID    string
	SinkLast int64
	BookLast int64
	Known    bool
}

func (l BookLack) String() string {
	if !l.Known {
		return fmt.Sprintf("run %q: the sink holds seqs 1..%d, the book never recorded the run", l.RunID, l.SinkLast)
	}
	return fmt.Sprintf("run %q: the sink holds up to seq %d, the book recorded up to %d (lacks %d..%d)",
		l.RunID, l.SinkLast, l.BookLast, l.BookLast+1, l.SinkLast)
}

// bookBehindError is ErrBookBehind with the runs it found.
type bookBehindError struct {
	lacks []BookLack // the first few
	total int
}

// bookBehindNamed is how many runs the error names; the rest are counted.
const bookBehindNamed = 5

func (e *bookBehindError) Error() string {
	var b strings.Builder
	runs := "runs"
	if e.total == 1 {
		runs = "run"
	}
	fmt.Fprintf(&b, "%v: the sink holds %d %s further than the book records: ", ErrBookBehind, e.total, runs)
	for i, l := range e.lacks {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l.String())
	}
	if n := e.total - len(e.lacks); n > 0 {
		fmt.Fprintf(&b, "; and %d more", n)
	}
	b.WriteString(" (restore the sink's copy that matches the book, or accept the sink's positions: outbox reconcile)")
	return b.String()
}

func (e *bookBehindError) Unwrap() error { return ErrBookBehind }

// BookLacks compares runs, as a sink listed them, with what the book recorded of each, and returns
// how many the book lacks lines of, with the first limit of them (all with limit < 0). It reads one row
// of the book per run, by its key (the per-run figures, kept for the life of the book, forgotten runs
// too): never a run's lines, and nothing of the runs the sink does not list.
//
// The per-run row (outbox_runs, migrations/00005) is the book's only memory of a run whose rows are
// all forgotten: its last_seq and projected survive forgetting, and nothing deletes the row. A change
// that ever prunes finished runs' rows must keep at least each run's id and highest seq (a table of
// them, or a high-water mark per run id prefix), or this comparison reads a pruned run as one the book
// never recorded and stops the relay: it fails safe, never silent.
//
// The book "recorded" a run up to the highest seq it ever gave it, projected or still pending: lines
// between the two are the batches a crash can leave in the sink unrecorded, which the relay sends
// again byte for byte; a sink's line beyond it is one the book never had.
func (s *Store) BookLacks(ctx context.Context, runs []SinkRun, limit int) (total int, lacks []BookLack, err error) {
	// A chunk of lookups per read, each its own short read transaction: no read holds the WAL for
	// the whole list.
	const chunk = 4096
	for start := 0; start < len(runs); start += chunk {
		part := runs[start:min(start+chunk, len(runs))]
		err := s.read(ctx, func(ctx context.Context) error {
			return s.lookupRuns(ctx, part, func(r SinkRun, last int64, known bool) {
				if known && r.LastSeq <= last {
					return
				}
				total++
				if limit < 0 || len(lacks) < limit {
					lacks = append(lacks, BookLack{RunID: r.RunID, SinkLast: r.LastSeq, BookLast: last, Known: known})
				}
			})
		})
		if err != nil {
			return 0, nil, fmt.Errorf("compare the sink's runs with the book: %w", err)
		}
	}
	return total, lacks, nil
}

// lookupRuns reads each run's highest recorded seq in one read transaction, through the driver's own
// statement, prepared once: database/sql would prepare and convert per lookup, several times SQLite's
// own work for a primary-key read.
func (s *Store) lookupRuns(ctx context.Context, runs []SinkRun, found func(r SinkRun, last int64, known bool)) error {
	conn, err := s.r.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c := dc.(driver.Conn).Raw()
		old := c.SetInterrupt(ctx)
		defer c.SetInterrupt(old)
		stmt, _, err := c.Prepare(db.RunGet)
		if err != nil {
			return err
		}
		defer stmt.Close()
		if stmt.ColumnCount() < 2 || stmt.ColumnName(0) != "last_seq" || stmt.ColumnName(1) != "projected" || stmt.BindCount() != 1 {
			return fmt.Errorf("outbox: the run lookup's statement is not the one the store reads: %s", db.RunGet)
		}
		if err := c.Exec("BEGIN"); err != nil {
			return err
		}
		// A read: nothing to keep or lose. It ends even when ctx has: an interrupted COMMIT would give
		// the connection back to the pool inside the transaction, whose every later read would see
		// this snapshot.
		defer func() {
			c.SetInterrupt(context.Background())
			c.Exec("COMMIT")
		}()
		for _, r := range runs {
			if err := lookupRun(stmt, r.RunID, func(last int64, known bool) { found(r, last, known) }); err != nil {
				return err
			}
		}
		return nil
	})
}

func lookupRun(stmt *sqlite3.Stmt, runID string, found func(last int64, known bool)) error {
	defer stmt.Reset()
	// RunGet's one parameter, ?1, is the run id.
	if err := stmt.BindText(1, runID); err != nil {
		return err
	}
	if stmt.Step() {
		// Columns of RunGet: last_seq, projected. The triggers keep last_seq at or above projected.
		found(max(stmt.ColumnInt64(0), stmt.ColumnInt64(1)), true)
		return nil
	}
	if err := stmt.Err(); err != nil {
		return err
	}
	found(0, false)
	return nil
}

// checkBook is the relay's first call's comparison of its sink with the book (see ErrBookBehind). It
// runs once per relay when it passes; a failure is returned again by every later call, since nothing
// the relay does can cure it.
func (r *Relay) checkBook(ctx context.Context) error {
	lister, ok := r.sink.(RunLister)
	if !ok || r.cfg.noBookCheck {
		return nil
	}
	r.bookMu.Lock()
	defer r.bookMu.Unlock()
	if r.bookChecked {
		return r.bookErr
	}
	var mark []byte
	if _, ok := lister.(SinceLister); ok {
		var err error
		if mark, err = r.s.bookMark(ctx); err != nil {
			return err
		}
	}
	runs, end, err := listSinkRuns(ctx, lister, mark)
	if err != nil {
		// The sink could not list its runs now (a failing disk, an ended ctx): the next call tries
		// again, as it would an append.
		return &sinkError{fmt.Errorf("list the sink's runs: %w", err)}
	}
	total, lacks, err := r.s.BookLacks(ctx, runs, bookBehindNamed)
	if err != nil {
		return err
	}
	if total == 0 && end != nil && !bytes.Equal(end, mark) {
		// Written only after the check passed, alone in its transaction: a crash before it costs
		// the next start a longer check, never a skipped one.
		if err := r.s.putBookMark(ctx, end); err != nil {
			return err
		}
	}
	r.bookChecked = true
	if total > 0 {
		r.bookErr = &bookBehindError{lacks: lacks, total: total}
		r.cfg.log.Error("outbox: relay stopped before its first append: the book is behind its sink", "err", r.bookErr)
	}
	return r.bookErr
}

// listSinkRuns lists the runs the book check compares: from a SinceLister, those with lines after the
// mark the book holds (all of them when it holds none, or the sink does not know it), with the sink's
// end to mark next; from a plain RunLister, all of them, and no mark.
func listSinkRuns(ctx context.Context, lister RunLister, mark []byte) (runs []SinkRun, end []byte, err error) {
	since, ok := lister.(SinceLister)
	if !ok {
		runs, err = lister.SinkRuns(ctx)
		return runs, nil, err
	}
	if mark != nil {
		runs, end, err = since.SinkRunsSince(ctx, mark)
		if !errors.Is(err, ErrMarkUnknown) {
			return runs, end, err
		}
	}
	return since.SinkRunsSince(ctx, nil)
}

// bookMark reads the sink's end at the last book check that passed; nil when the book holds none.
func (s *Store) bookMark(ctx context.Context) (mark []byte, err error) {
	err = s.read(ctx, func(ctx context.Context) error {
		mark, err = s.q.BookMarkGet(ctx, s.r)
		if errors.Is(err, sql.ErrNoRows) {
			mark, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the book's mark of its sink: %w", err)
	}
	return mark, nil
}

// putBookMark records the sink's end at a book check that passed.
func (s *Store) putBookMark(ctx context.Context, mark []byte) error {
	err := s.write(ctx, durable, func(w *txWriter) error {
		return w.q.BookMarkPut(w.ctx, w.tx, mark)
	})
	if err != nil {
		return fmt.Errorf("record the book's mark of its sink: %w", err)
	}
	return nil
}
