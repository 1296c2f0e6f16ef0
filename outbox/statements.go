// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/litedb"
)

// The statements every write runs, prepared once on the writer connection (litedb.Statements). They still run through
// sqlc's generated calls (see txWriter.on), which bind the arguments from the query's …Params struct:
// a query whose parameters are reordered regenerates its binding with it, instead of writing a value
// into another column.
type stmtID int

const (
	stmtLastSeq stmtID = iota
	stmtOnceFound
	stmtInsert
	stmtInsertLine
	stmtProgressSet
	stmtTakeProjected
	stmtLedgerPut
	stmtStopClear
	stmtRunGet
	stmtKeepLastSeq
	stmtForgetRange
	stmtSetForgotten
	stmtFold
	numStmts
)

var stmtSQL = [numStmts]string{
	stmtLastSeq:       db.EventLastSeq,
	stmtOnceFound:     db.EventsOnceKeyExists,
	stmtInsert:        db.EventInsert,
	stmtInsertLine:    db.EventLineInsert,
	stmtProgressSet:   db.ProgressSet,
	stmtTakeProjected: db.LedgerTakeProjected,
	stmtLedgerPut:     db.LedgerPut,
	stmtStopClear:     db.StopClear,
	stmtRunGet:        db.RunGet,
	stmtKeepLastSeq:   db.ProgressKeepLastSeq,
	stmtForgetRange:   db.EventsForgetRange,
	stmtSetForgotten:  db.RunSetForgotten,
	stmtFold:          db.RunFold,
}

// txWriter is one write transaction as the store's methods use it: each method is one generated call,
// run on the store's prepared statement when the transaction is the store's own. It also remembers
// each run's last seq once read, so that the calls of a group, or the events of a batch, number on
// from each other without reading it again, and counts the lines it inserts (see lineCounts).
type txWriter struct {
	ctx   context.Context // the operation's: it bounds each statement
	q     *db.Queries
	tx    *sql.Tx
	st    *litedb.Statements // nil on a transaction the store did not begin, where statements run unprepared
	bound [numStmts]litedb.Prepared
	last  map[string]int64
	group *groupRun // the group committer's group this transaction is; nil for every other
	// counts are the transaction's, shared by every txWriter on it (EnqueueTx makes one a call).
	counts *lineCounts
	raw    *rawAddLines // on a transaction of the store's own; nil on a caller's
}

func (s *Store) newTxWriter(ctx context.Context, tx *sql.Tx, st *litedb.Statements, counts *lineCounts) *txWriter {
	w := &txWriter{ctx: ctx, q: s.q, tx: tx, st: st, counts: counts}
	if st != nil && s.addLines.conn != nil {
		w.raw = &s.addLines
	}
	return w
}

// on returns where the generated call for id runs: the prepared statement bound to the transaction,
// or the transaction itself.
func (w *txWriter) on(id stmtID) db.DBTX {
	if w.st == nil {
		return w.tx
	}
	return w.st.On(w.ctx, w.tx, &w.bound[id], int(id))
}

// nextSeq returns the seq runID's next event gets in this transaction, or ErrSeqExhausted.
func (w *txWriter) nextSeq(runID string) (int64, error) {
	last, ok := w.last[runID]
	if !ok {
		var err error
		if last, err = w.q.EventLastSeq(w.ctx, w.on(stmtLastSeq), runID); err != nil {
			return 0, fmt.Errorf("last seq of run %q: %w", runID, mapErr(w.ctx, err))
		}
	}
	if last == math.MaxInt64 {
		return 0, fmt.Errorf("%w: run %q", ErrSeqExhausted, runID)
	}
	return last + 1, nil
}

// onceKeyFound reports whether key is in the ledger or held by a pending row.
func (w *txWriter) onceKeyFound(key string) (bool, error) {
	found, err := w.q.EventsOnceKeyExists(w.ctx, w.on(stmtOnceFound), key)
	if err != nil {
		return false, fmt.Errorf("look up once key %q: %w", key, mapErr(w.ctx, err))
	}
	return found != 0, nil
}

// spillOver is the length from which a line is stored in events_lines instead of in its row
// (migrations/00003): below it a row's cell fits in its page with room to spare, so reading it whole
// to compare keys costs nothing.
const spillOver = 512

// insert stores one event: its row, and a large line apart from it. A failed statement undoes only
// itself (SQLite's statement journal), unless SQLite ends the transaction (see Store.txLost), and the
// transaction may still commit (a group's other calls, a caller's own writes around EnqueueTx): so
// what a failed insert leaves is taken out again (see undoInsert).
func (w *txWriter) insert(p db.EventInsertParams) error {
	if len(p.Line) >= spillOver {
		id, err := w.q.EventLineInsert(w.ctx, w.on(stmtInsertLine), p.Line)
		if err != nil {
			return fmt.Errorf("insert line %d of run %q: %w", p.Seq, p.EngineRunID, mapErr(w.ctx, err))
		}
		p.Line, p.Spill = []byte{}, id
	}
	n, err := w.q.EventInsert(w.ctx, w.on(stmtInsert), p)
	if err != nil {
		return w.undoInsert(p, fmt.Errorf("insert line %d of run %q: %w", p.Seq, p.EngineRunID, mapErr(w.ctx, err)))
	}
	if n != 1 {
		// A trigger's RAISE(IGNORE) skips the insert without an error: the seq would be reported
		// as stored while it holds nothing, and handed to the next call.
		return w.undoInsert(p, fmt.Errorf("insert line %d of run %q: %w", p.Seq, p.EngineRunID, errInsertIgnored))
	}
	if w.last == nil {
		w.last = map[string]int64{}
	}
	w.last[p.EngineRunID] = p.Seq
	w.counts.add(p.EngineRunID, p.Seq)
	return nil
}

var errInsertIgnored = errors.New("outbox: the insert stored no row (a trigger ignored it)")

// undoInsert takes out what a failed insert of p may have left, and returns err. The row itself can
// stay: a trigger's RAISE(FAIL) fails the statement but keeps what it wrote. Its seq was the run's
// next, so a row there is this insert's, unless the insert failed on the key, which means another row
// holds it. The row's delete trigger drops a large line with it; a large line whose row never was
// written is deleted by its id. Neither takes the caller's context: an insert refused for another
// reason must not leave anything behind because the context ended in between.
func (w *txWriter) undoInsert(p db.EventInsertParams, err error) error {
	ctx := context.WithoutCancel(w.ctx)
	if !errors.Is(err, sqlite3.CONSTRAINT_PRIMARYKEY) {
		// The row is marked counted and above what the run's figures hold: neither its insert nor
		// its delete moves them (migrations/00007).
		if derr := w.q.EventDelete(ctx, w.tx, db.EventDeleteParams{EngineRunID: p.EngineRunID, Seq: p.Seq}); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete its row: %w", derr))
		}
	}
	if p.Spill != 0 {
		if derr := w.q.EventLineDelete(ctx, w.tx, p.Spill); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete its line: %w", derr))
		}
	}
	return err
}

// setProgress moves a run's projected position.
func (w *txWriter) setProgress(p db.ProgressSetParams) error {
	if err := w.q.ProgressSet(w.ctx, w.on(stmtProgressSet), p); err != nil {
		return fmt.Errorf("record progress of run %q: %w", p.EngineRunID, mapErr(w.ctx, err))
	}
	return nil
}

// clearStop removes a run's record of a stop (see Store.recordStop): the run projects again.
func (w *txWriter) clearStop(runID string) error {
	if err := w.q.StopClear(w.ctx, w.on(stmtStopClear), runID); err != nil {
		return fmt.Errorf("clear the stop of run %q: %w", runID, mapErr(w.ctx, err))
	}
	return nil
}

// markProjected moves the announce keys of a batch's projected lines into the ledger, where each row
// keeps the key and the line's digest, not the line (see queries/outbox_ledger.sql). A line whose key
// is already in the ledger, or that has none, is left as it is. Every row is taken out before any is
// put back: the deletes let SQLite merge the pages they empty, and the rows put back then fill pages
// in seq order, where a put after each take leaves pages about four fifths full.
func (w *txWriter) markProjected(runID string, marks []ledgerMark) error {
	keys := make([]string, len(marks))
	for i, m := range marks {
		key, err := w.q.LedgerTakeProjected(w.ctx, w.on(stmtTakeProjected), db.LedgerTakeProjectedParams{EngineRunID: runID, Seq: m.seq})
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("mark line %d of run %q announced: %w", m.seq, runID, mapErr(w.ctx, err))
		}
		keys[i] = key
	}
	for i, m := range marks {
		if keys[i] == "" {
			continue
		}
		err := w.q.LedgerPut(w.ctx, w.on(stmtLedgerPut), db.LedgerPutParams{EngineRunID: runID, Seq: m.seq, OnceKey: keys[i], Digest: m.digest})
		if err != nil {
			return fmt.Errorf("mark line %d of run %q announced as %q: %w", m.seq, runID, keys[i], mapErr(w.ctx, err))
		}
	}
	return nil
}

// errOtherQuery is the error of a statement prepared from one query and given another: a mistake in
// the package's own code, which its tests run.
var errOtherQuery = litedb.ErrOtherQuery

// pendingColumns are the pending read's columns as readPending steps them; checkColumns holds the
// statement to them, so that a reordered SELECT fails its first read instead of reading one column
// as another.
const (
	pendingSeq = iota
	pendingLine
	pendingToMark
)

var pendingColumns = []string{pendingSeq: "seq", pendingLine: "line", pendingToMark: "to_mark"}

// The pending read's parameters, by the numbers its SQL gives them (queries/events_outbox.sql), which
// readPending binds through the driver's own API; checkParams holds the statement to their count.
const (
	pendingRunID = iota + 1
	pendingAfter
	pendingLimit
	pendingParams = pendingLimit
)

func checkParams(stmt *sqlite3.Stmt, want int) error {
	if n := stmt.BindCount(); n != want {
		return fmt.Errorf("outbox: the pending read has %d parameters, the store binds %d", n, want)
	}
	return nil
}

func checkColumns(stmt *sqlite3.Stmt, want []string) error {
	if n := stmt.ColumnCount(); n != len(want) {
		return fmt.Errorf("outbox: the pending read has %d columns, the store reads %d", n, len(want))
	}
	for i, name := range want {
		if got := stmt.ColumnName(i); got != name {
			return fmt.Errorf("outbox: the pending read's column %d is %q, the store reads it as %q", i, got, name)
		}
	}
	return nil
}
