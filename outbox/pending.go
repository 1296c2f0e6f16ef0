// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"
	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/litedb"
)

// PendingEvents returns at most limit of runID's stored lines with seq > after, in seq order. A
// once-keyed line the relay has recorded projected is not among them: its row keeps its key and
// digest (LineDigest), and the journal its bytes. A limit
// below 1 is refused: a relay whose journal refuses writes re-reads the same prefix on every
// attempt, and only a bound keeps that attempt's cost fixed as the backlog grows.
func (s *Store) PendingEvents(ctx context.Context, runID string, after int64, limit int) ([]EventLine, error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("outbox: PendingEvents: limit %d: it must be at least 1", limit)
	}
	lines, _, err := s.pending(ctx, runID, after, limit, math.MaxInt)
	return lines, err
}

// pending is PendingEvents for the relay: it also returns the seqs whose announce key is not yet in the
// ledger, so that recording the batch touches those rows only, and it stops at maxBytes of lines (see
// readPending).
//
// It reads through the driver's own statement API rather than database/sql, whose per-row conversions
// (each column into a driver.Value, then again into the scan target, two copies of every line) cost
// more than SQLite's own work here: this read is most of a relay's CPU (BenchmarkPendingEvents,
// BenchmarkRelayDrain). The lines are copied once, into one buffer per batch. The SQL is still sqlc's,
// and its plan is asserted.
func (s *Store) pending(ctx context.Context, runID string, after int64, limit, maxBytes int) (out []EventLine, toMark []ledgerMark, err error) {
	err = s.read(ctx, func(ctx context.Context) error {
		if out, toMark, err = s.readPendingRows(ctx, runID, after, limit, maxBytes); err != nil {
			return err
		}
		// Lines leave the process only once durable: a line projected and then lost to power
		// failure would come back under its number with other bytes. The wait is inside the read,
		// so Close waits for it.
		return s.dur.waitVisible()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read pending lines of run %q: %w", runID, err)
	}
	return out, toMark, nil
}

// readPendingRows runs the pending read on the store's own connection and statement when they are
// free; another relay reading at the same time takes a connection from the pool and prepares its own.
func (s *Store) readPendingRows(ctx context.Context, runID string, after int64, limit, maxBytes int) (out []EventLine, toMark []ledgerMark, err error) {
	if s.pr.mu.TryLock() {
		defer s.pr.mu.Unlock()
		if stmt, err := s.pr.statement(s); err == nil {
			return readPending(ctx, s.pr.conn, stmt, runID, after, limit, maxBytes)
		}
	}
	conn, err := s.r.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		c := dc.(driver.Conn).Raw()
		stmt, err := preparePending(c)
		if err != nil {
			return err
		}
		defer stmt.Close()
		out, toMark, err = readPending(ctx, c, stmt, runID, after, limit, maxBytes)
		return err
	})
	return out, toMark, err
}

// pendingReader is a read-only connection of the store's own with the pending read prepared once,
// outside database/sql's pool so that the statement's life is the connection's: Store.Close finalizes
// one and closes the other.
type pendingReader struct {
	mu   sync.Mutex
	conn *sqlite3.Conn
	stmt *sqlite3.Stmt
}

// statement opens the connection and prepares the read at first use. Call it with mu held.
func (p *pendingReader) statement(s *Store) (*sqlite3.Stmt, error) {
	if p.stmt != nil {
		return p.stmt, nil
	}
	if s.readOnly {
		return nil, ErrReadOnly // a read-only store reads through its pool only (see readonly.go)
	}
	c, err := litedb.OpenConn(s.path, s.dbConfig(), s.file)
	if err != nil {
		return nil, err
	}
	stmt, err := preparePending(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	p.conn, p.stmt = c, stmt
	return stmt, nil
}

// preparePending prepares sqlc's pending read on c, holding it to the columns readPending reads.
func preparePending(c *sqlite3.Conn) (*sqlite3.Stmt, error) {
	stmt, _, err := c.Prepare(db.EventsPending)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(checkColumns(stmt, pendingColumns), checkParams(stmt, pendingParams)); err != nil {
		stmt.Close()
		return nil, err
	}
	return stmt, nil
}

func (p *pendingReader) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := errors.Join(p.stmt.Close(), p.conn.Close())
	p.conn, p.stmt = nil, nil
	return err
}

// maxPendingGuess bounds the buffer a pending read sizes in advance.
const maxPendingGuess = 4 << 20

// readPending reads at most limit lines, and stops before the line that would take the batch past
// maxBytes of lines, so that a batch of large lines holds a few of them, not limit; a first line longer
// than maxBytes is returned alone. The row it stops at has been stepped and is read again by the next
// batch: SQLite loads a row's line when it steps to it, so that costs one line's read per full batch.
func readPending(ctx context.Context, c *sqlite3.Conn, stmt *sqlite3.Stmt, runID string, after int64, limit, maxBytes int) (out []EventLine, toMark []ledgerMark, err error) {
	old := c.SetInterrupt(ctx)
	defer c.SetInterrupt(old)
	defer stmt.Reset()
	err = errors.Join(stmt.BindText(pendingRunID, runID), stmt.BindInt64(pendingAfter, after),
		stmt.BindInt64(pendingLimit, int64(limit)))
	if err != nil {
		return nil, nil, err
	}
	rows := min(limit, 1024)
	out = make([]EventLine, 0, rows)
	ends := make([]int, 0, rows)
	var buf []byte
	for stmt.Step() {
		seq := stmt.ColumnInt64(pendingSeq)
		line := stmt.ColumnRawBlob(pendingLine)
		if len(line) == 0 {
			// No enqueue stores an empty line: this is a ledger row whose line a book migrated
			// down past version 6 lost (migrations/00006). Sent, it would give the reader an
			// empty line under the seq of one it has.
			return nil, nil, fmt.Errorf("line %d of run %q: %w: the book no longer keeps its bytes", seq, runID, ErrRowsMissing)
		}
		if len(out) > 0 && len(line) > maxBytes-len(buf) {
			break
		}
		if buf == nil {
			// Sized from the first line, so that a batch of lines of about its length is copied
			// into the buffer without growing it; but never guessed past maxPendingGuess or the
			// batch's bound, since one long line says nothing about the rest (a 64 MiB first line
			// would ask for 80 GB).
			buf = make([]byte, 0, min((len(line)+len(line)/4+16)*rows, max(len(line), min(maxPendingGuess, maxBytes))))
		}
		buf = appendBounded(buf, line, maxBytes)
		ends = append(ends, len(buf))
		out = append(out, EventLine{Seq: seq})
		if stmt.ColumnInt64(pendingToMark) != 0 {
			toMark = append(toMark, ledgerMark{seq: seq, digest: LineDigest(line)})
		}
		if len(buf) >= maxBytes {
			break
		}
	}
	if err := stmt.Err(); err != nil {
		return nil, nil, err
	}
	// The buffer has stopped moving: slice it now. A line's capacity ends with it, so appending to
	// one cannot overwrite the next.
	start := 0
	for i, end := range ends {
		out[i].Line = buf[start:end:end]
		start = end
	}
	return out, toMark, nil
}

// appendBounded appends line to buf, growing buf no further than bound (or than buf and line need).
// append's own growth, up to twice what is needed, is kept while that stays under the bound.
func appendBounded(buf, line []byte, bound int) []byte {
	need := len(buf) + len(line)
	if need <= cap(buf) || need <= bound/2 {
		return append(buf, line...)
	}
	grown := make([]byte, len(buf), min(max(2*cap(buf), need), max(bound, need)))
	copy(grown, buf)
	return append(grown, line...)
}
