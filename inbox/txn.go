// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/inbox/internal/db"
	"github.com/textmachine/outbox/internal/litedb"
)

// txn is one write transaction of the inbox: the runs it has touched, with what it applied to each,
// which reach the tables once per run at the end (flush) rather than once per line.
type txn struct {
	ctx   context.Context // the caller's: it bounds each statement
	in    *Inbox
	tx    *sql.Tx
	now   int64 // unix nanoseconds, fixed at the start of the transaction
	bound [numStmts]litedb.Prepared
	runs  map[string]*runTx
	order []*runTx // in the order first seen, so that every call writes in one order
	sp    [numSavepointStmts]*sqlite3.Stmt

	spName string // the name of the savepoint around each handler call; drawn at its first use
	spUsed bool   // a handler ran inside it and returned

	touched  bool   // a run's applied_at was set to now
	trimNext *int64 // when trimIdle looked: when to look again
}

// The statements of the savepoint around each handler call, prepared once per transaction on the
// driver's own connection: as text they would be prepared again for every line.
const (
	spBegin = iota
	spRelease
	spUndo
	numSavepointStmts
)

var savepointSQL = [numSavepointStmts]string{
	spBegin:   `SAVEPOINT `,
	spRelease: `RELEASE `,
	spUndo:    `ROLLBACK TO `,
}

// The savepoint's name is drawn at random for each transaction: SQLite matches RELEASE and
// ROLLBACK TO against the innermost savepoint of a name, so a handler's own savepoint named like
// the inbox's would take the undo of a quarantined line onto itself and keep the writes made
// before it. No statement lists a connection's savepoints, so no handler can learn the name.
const savepointPrefix = "inbox_line_"

// savepoint runs one of the savepoint statements.
func (t *txn) savepoint(which int) error {
	st := t.sp[which]
	if st == nil {
		if t.spName == "" {
			t.spName = t.in.cfg.savepoint
			if t.spName == "" {
				t.spName = savepointPrefix + rand.Text()
			}
		}
		var err error
		if st, _, err = t.in.wr.Raw.Prepare(savepointSQL[which] + t.spName); err != nil {
			return err
		}
		t.sp[which] = st
	}
	return st.Exec()
}

// endLine ends the savepoint of a line whose handler returned, undoing the line's writes first when
// undo is set, and checks that the savepoint it ends is the one the inbox opened. A handler that
// released it (RELEASE of its name) leaves none to end: its writes are then the transaction's,
// past the line's undo. One that opened a savepoint of its name leaves the inbox's beneath its
// own, which the undo would stop at. Either way the line can no longer be undone alone, and the
// call fails whole (ErrSavepointMisused). A savepoint of the handler's own name that it left open
// ends with the inbox's, undone with it or kept with it. (A handler that ended the transaction
// itself was found before, ErrTxEnded.)
func (t *txn) endLine(undo bool) error {
	if undo {
		if err := t.savepoint(spUndo); err != nil {
			return misused(err)
		}
	}
	if err := t.savepoint(spRelease); err != nil {
		return misused(err)
	}
	t.spUsed = true
	if undo {
		return t.noSavepointLeft()
	}
	return nil
}

// noSavepointLeft checks that no savepoint of the inbox's name is still open: one is when a handler
// of this transaction opened a savepoint of that name and the inbox ended that one instead of its own.
func (t *txn) noSavepointLeft() error {
	switch err := t.savepoint(spRelease); {
	case err == nil:
		return ErrSavepointMisused
	case !noSuchSavepoint(err):
		return err
	}
	return nil
}

// misused reports a savepoint statement that failed because the savepoint was gone as the
// handler's misuse.
func misused(err error) error {
	if noSuchSavepoint(err) {
		return ErrSavepointMisused
	}
	return err
}

// noSuchSavepoint reports SQLite's answer to RELEASE or ROLLBACK TO a name no open savepoint has. It
// has no code of its own, only the generic error with this text.
func noSuchSavepoint(err error) bool {
	return errors.Is(err, sqlite3.ERROR) && strings.Contains(err.Error(), "no such savepoint")
}

// close finalizes the transaction's own statements.
func (t *txn) close() {
	for _, st := range t.sp {
		if st != nil {
			st.Close()
		}
	}
}

// runTx is one run as a transaction sees it.
type runTx struct {
	id          string
	start       int64 // the high-water mark when the transaction first read it
	hwm         int64 // including the lines this transaction applied
	quarantined bool
	digests     [][sha256.Size]byte // of the lines start+1 .. hwm
}

func newTxn(ctx context.Context, in *Inbox, tx *sql.Tx) *txn {
	return &txn{ctx: ctx, in: in, tx: tx, now: in.cfg.now().UnixNano()}
}

// on returns where the generated call for id runs: its prepared statement, bound to the transaction.
func (t *txn) on(id stmtID) db.DBTX {
	return t.in.st.On(t.ctx, t.tx, &t.bound[id], int(id))
}

// alive reports a transaction that has ended before the inbox committed it: a handler committed or
// rolled it back, or a failed or interrupted statement made SQLite roll it back, after which every
// statement would commit on its own.
func (t *txn) alive() error {
	if t.in.wr.Lost() {
		return ErrTxEnded
	}
	return nil
}

// run returns the run's state in this transaction, reading it once.
func (t *txn) run(id string) (*runTx, error) {
	if r, ok := t.runs[id]; ok {
		return r, nil
	}
	s, err := t.in.q.RunState(t.ctx, t.on(stmtRunState), id)
	if err != nil {
		return nil, fmt.Errorf("inbox: read run %q: %w", id, err)
	}
	r := &runTx{id: id, start: s.Hwm, hwm: s.Hwm, quarantined: s.Quarantined != 0}
	if t.runs == nil {
		t.runs = map[string]*runTx{}
	}
	t.runs[id] = r
	t.order = append(t.order, r)
	return r, nil
}

// digest returns the digest of the run's line seq as applied, and false when it is not kept (a row
// never holds zeros for a line applied: they stand for a seq given up by an accepted gap).
func (t *txn) digest(r *runTx, seq int64) ([sha256.Size]byte, bool, error) {
	if seq > r.start {
		return r.digests[seq-r.start-1], true, nil
	}
	var d [sha256.Size]byte
	b, err := t.in.q.DigestGet(t.ctx, t.on(stmtDigestGet), db.DigestGetParams{EngineRunID: r.id, Chunk: chunkOf(seq), Seq: seq})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return d, false, nil
	case err != nil:
		return d, false, fmt.Errorf("inbox: read the digest of run %q seq %d: %w", r.id, seq, err)
	case len(b) != sha256.Size:
		return d, false, fmt.Errorf("inbox: run %q seq %d: a stored digest of %d bytes", r.id, seq, len(b))
	}
	copy(d[:], b)
	return d, d != [sha256.Size]byte{}, nil
}

// digestsPerRow is how many of a run's digests one row of inbox_digests holds: row c holds seqs
// c*digestsPerRow+1 .. (c+1)*digestsPerRow. It is part of the stored format (migration 00002 and
// its CHECK constraints spell the same 16), chosen so that a row stays inside its b-tree page.
const digestsPerRow = 16

// chunkOf is the row that holds the digest of seq.
func chunkOf(seq int64) int64 { return (seq - 1) / digestsPerRow }

// windowFrom is the lowest row a run at high-water mark hwm keeps: the one holding the oldest seq
// still in its window, hwm-window+1. Rows below it hold only seqs older than the window.
func (t *txn) windowFrom(hwm int64) int64 { return max(hwm-t.in.cfg.window, 0) / digestsPerRow }

// quarantine parks a run.
func (t *txn) quarantine(r *runTx, reason string, expected, got int64, detail string) error {
	err := t.in.q.QuarantineInsert(t.ctx, t.tx, db.QuarantineInsertParams{
		EngineRunID: r.id, Reason: reason, Expected: expected, Got: got, Detail: detail, Since: t.now,
	})
	if err != nil {
		return fmt.Errorf("inbox: quarantine run %q: %w", r.id, err)
	}
	r.quarantined = true
	t.in.cfg.logger.Warn("inbox: run quarantined", "run", r.id, "reason", reason, "expected", expected, "got", got, "detail", detail)
	return nil
}

// flush writes what the transaction applied to each run: its digests, appended to their rows, its
// high-water mark, and the rows that have left its window dropped.
func (t *txn) flush() error {
	for _, r := range t.order {
		if len(r.digests) == 0 {
			continue
		}
		if err := t.appendDigests(r); err != nil {
			return fmt.Errorf("inbox: store the digests of run %q: %w", r.id, err)
		}
		if err := t.in.q.RunSet(t.ctx, t.on(stmtRunSet), db.RunSetParams{EngineRunID: r.id, Hwm: r.hwm, AppliedAt: t.now}); err != nil {
			return fmt.Errorf("inbox: store the high-water mark of run %q: %w", r.id, err)
		}
		t.touch()
		// The window's lowest row moves once every digestsPerRow lines; the rows below it then go,
		// and with them any that a window lowered across a reopen left.
		if from := t.windowFrom(r.hwm); from > t.windowFrom(r.start) {
			if err := t.in.q.DigestsDropBelow(t.ctx, t.on(stmtDigestsDrop), db.DigestsDropBelowParams{EngineRunID: r.id, Chunk: from}); err != nil {
				return fmt.Errorf("inbox: drop the old digests of run %q: %w", r.id, err)
			}
		}
	}
	return nil
}

// appendDigests appends the digests of the run's lines start+1..hwm to their rows, one statement per
// row, skipping the rows that leave the window in the same call.
func (t *txn) appendDigests(r *runTx) error {
	first := max(r.start+1, t.windowFrom(r.hwm)*digestsPerRow+1)
	buf := make([]byte, 0, digestsPerRow*sha256.Size)
	for seq := first; seq <= r.hwm; {
		c := chunkOf(seq)
		// The row's last seq, (c+1)*digestsPerRow, is past the int64 range for the top row: count
		// from the row's start instead, so that a run whose seqs an accepted gap took near the top
		// still gets its digests stored.
		last := c*digestsPerRow + min(r.hwm-c*digestsPerRow, digestsPerRow)
		buf = buf[:0]
		for _, d := range r.digests[seq-r.start-1 : last-r.start] {
			buf = append(buf, d[:]...)
		}
		if err := t.in.q.DigestsAppend(t.ctx, t.on(stmtDigestsAppend), db.DigestsAppendParams{
			EngineRunID: r.id, Chunk: c, FirstSeq: seq, Digests: buf,
		}); err != nil {
			return err
		}
		if last == r.hwm {
			break // last + 1 would wrap at the top of the int64 range
		}
		seq = last + 1
	}
	return nil
}

// Retention trimming is bounded per call: at most trimRuns idle runs are looked at and trimRows rows
// of digests (4,096 digests) dropped, so a call after a long pause does not pay for every idle run at
// once.
const (
	trimRuns = 4
	trimRows = 4096 / digestsPerRow
)

// trimIdle drops the digests of runs idle past the retention, but each run's last line's. It looks
// only once a run can have become idle (Inbox.nextTrim), so that a busy inbox pays one comparison a
// call for it.
func (t *txn) trimIdle() error {
	if t.now < t.in.nextTrim {
		return nil
	}
	runs, err := t.in.q.RunsUntrimmed(t.ctx, t.on(stmtRunsUntrimmed), trimRuns)
	if err != nil {
		return fmt.Errorf("inbox: find idle runs: %w", err)
	}
	retention := int64(t.in.cfg.retention)
	next := int64(math.MaxInt64) // no run left to trim: none until one applies
	if len(runs) == trimRuns {
		next = t.now // perhaps more idle runs after these
	}
	budget := int64(trimRows)
	for _, r := range runs {
		if r.AppliedAt >= t.now-retention {
			next = r.AppliedAt + retention // the longest idle is not idle yet
			break
		}
		n, err := t.in.q.DigestsTrim(t.ctx, t.tx, db.DigestsTrimParams{
			EngineRunID: r.EngineRunID, Hwm: r.Hwm, HwmChunk: chunkOf(r.Hwm), MaxRows: budget,
		})
		if err != nil {
			return fmt.Errorf("inbox: trim the digests of idle run %q: %w", r.EngineRunID, err)
		}
		if budget -= n; budget <= 0 {
			next = t.now // the run may hold more: the next call goes on with it
			break
		}
		if err := t.in.q.DigestsKeepLast(t.ctx, t.tx, db.DigestsKeepLastParams{
			EngineRunID: r.EngineRunID, Hwm: r.Hwm, HwmChunk: chunkOf(r.Hwm),
		}); err != nil {
			return fmt.Errorf("inbox: trim the digests of idle run %q: %w", r.EngineRunID, err)
		}
		if err := t.in.q.RunMarkTrimmed(t.ctx, t.tx, r.EngineRunID); err != nil {
			return fmt.Errorf("inbox: trim idle run %q: %w", r.EngineRunID, err)
		}
	}
	t.trimNext = &next
	return nil
}

// touch records that the transaction made a run active now: it can be idle a retention later.
func (t *txn) touch() { t.touched = true }

// committed carries what the inbox keeps in memory about its tables over to the next transaction,
// once this one has committed.
func (t *txn) committed() {
	if t.trimNext != nil {
		t.in.nextTrim = *t.trimNext
	}
	if t.touched {
		t.in.nextTrim = min(t.in.nextTrim, t.now+int64(t.in.cfg.retention))
	}
}
