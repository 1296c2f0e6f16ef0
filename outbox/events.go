// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/litedb"
)

// EventLine is one stored journal line: its sequence number and its exact bytes, without a newline.
type EventLine struct {
	Seq  int64
	Line []byte
}

// EventBuilder renders the line for the sequence number the store has just assigned. It runs inside
// the write transaction, so its failure rolls the number back with everything else. Returning a nil
// line declines: nothing is stored and no number is used. It must not call the store's write methods:
// the store's one writer connection is busy with the transaction it runs in (with group commit, on the
// committer goroutine, between the other calls of its group), and such a call fails at once with
// ErrCallInsideTx. RunBuilder makes one that is given the enqueue's run id as well.
type EventBuilder func(seq int64) ([]byte, error)

// EnqueueEvent assigns runID's next sequence number, has build render the line, and stores it, in one
// transaction. It returns the number, or 0 when build declined. An error from build is returned
// (wrapped) and nothing is stored.
func (s *Store) EnqueueEvent(ctx context.Context, runID string, build EventBuilder) (seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return 0, err
	}
	return s.enqueueCall(ctx, runID, "", build)
}

// EnqueueOnce is EnqueueEvent for an event that must reach the journal once for the life of the book,
// whatever crashes and restarts happen: the announcement that a unit is done, which a reader counts.
//
// When onceKey is already in the ledger, or pending on a line not yet projected, it returns
// (false, 0, nil) without calling build: one row per key for the life of the book. Otherwise it
// enqueues and returns (true, seq, nil); a declining build gives (false, 0, nil). The key is stored
// with the line and enters the ledger when the relay (or MarkAnnounced) records that the line reached
// the journal; Relay.Recover does that for lines an earlier process left pending.
func (s *Store) EnqueueOnce(ctx context.Context, runID, onceKey string, build EventBuilder) (announcing bool, seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return false, 0, err
	}
	if err := checkOnceKey(onceKey); err != nil {
		return false, 0, err
	}
	seq, err = s.enqueueCall(ctx, runID, onceKey, build)
	return seq > 0, seq, err
}

// enqueueCall runs one enqueue: through the group committer, or in a transaction of its own.
func (s *Store) enqueueCall(ctx context.Context, runID, onceKey string, build EventBuilder) (int64, error) {
	if s.cfg.groupCommit && !s.readOnly {
		return s.submit(ctx, runID, onceKey, build)
	}
	var seq int64
	err := s.write(ctx, durable, func(w *txWriter) (err error) {
		seq, _, err = s.enqueue(w.ctx, w, runID, onceKey, build)
		return raise(err)
	})
	return committedSeq(seq, err)
}

// EnqueueEvents enqueues a batch of runID's events in one transaction, all or nothing: each builder
// gets the next number in order; a declining builder takes none, and its entry in seqs is 0. An error
// from any builder (or a line it renders that is invalid) stores none of them.
func (s *Store) EnqueueEvents(ctx context.Context, runID string, builds []EventBuilder) (seqs []int64, err error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	for i, b := range builds {
		if b == nil {
			return nil, fmt.Errorf("outbox: EnqueueEvents: builder %d is nil", i)
		}
	}
	seqs = make([]int64, len(builds))
	if len(builds) == 0 {
		return seqs, nil
	}
	err = s.write(ctx, durable, func(w *txWriter) error {
		for i, build := range builds {
			seq, _, err := s.enqueue(w.ctx, w, runID, "", build)
			if err != nil {
				return raise(err)
			}
			seqs[i] = seq
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return nil, err
	}
	return seqs, err
}

// committedSeq is what an enqueue returns: the seq with a nil error, or with ErrNotDurable, whose
// commit was made; 0 with any other error, which means nothing was stored.
func committedSeq(seq int64, err error) (int64, error) {
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return 0, err
	}
	return seq, err
}

// EnqueueTx is EnqueueEvent inside a transaction the caller holds, usually the one WriteTx passes to
// its function: the event then commits or rolls back with the caller's own writes. The caller commits.
// If the caller rolls back, the number is not used. On the transaction WriteTx passes, it fails
// without writing when SQLite has already rolled that transaction back (a statement of the caller's
// was interrupted by its context): its insert would otherwise commit on its own. On a transaction of
// the caller's own *sql.DB the store cannot ask SQLite that: a caller whose statement in it failed
// must not go on to EnqueueTx, or the event is stored on its own while the transaction is not.
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, runID string, build EventBuilder) (seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return 0, err
	}
	return s.enqueueTx(ctx, tx, runID, "", build)
}

// EnqueueOnceTx is EnqueueOnce inside a transaction the caller holds, usually the one WriteTx passes
// to its function: the announcement commits or rolls back with the state change it announces. It
// returns (false, 0, nil) without calling build when onceKey is in the ledger or pending, and is
// otherwise EnqueueTx, with the same rules for the caller's transaction. The key is held from the
// commit on; a rolled-back transaction leaves it free.
func (s *Store) EnqueueOnceTx(ctx context.Context, tx *sql.Tx, runID, onceKey string, build EventBuilder) (announcing bool, seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return false, 0, err
	}
	if err := checkOnceKey(onceKey); err != nil {
		return false, 0, err
	}
	seq, err = s.enqueueTx(ctx, tx, runID, onceKey, build)
	return seq > 0, seq, err
}

// enqueueTx is the body of EnqueueTx and EnqueueOnceTx.
func (s *Store) enqueueTx(ctx context.Context, tx *sql.Tx, runID, onceKey string, build EventBuilder) (seq int64, err error) {
	if tx == nil {
		return 0, errors.New("outbox: EnqueueTx with a nil transaction")
	}
	if err := s.enter(true); err != nil {
		return 0, err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	defer func() { err = s.named(err) }()
	w := s.newTxWriter(ctx, tx, nil, &lineCounts{})
	own := s.current.Load()
	if own != nil && own.tx == tx {
		if err := s.txLost(); err != nil {
			return 0, err
		}
		// The store's own transaction, on the writer connection: its lines are added to the
		// figures with the transaction's others, when write commits it.
		w.st, w.counts = s.stmts, own.counts
	}
	seq, _, err = s.enqueue(ctx, w, runID, onceKey, build)
	if w.st == nil {
		// A transaction of the caller's, which the caller commits: the line is added now, in it.
		// A call that stored nothing has nothing to add.
		if cerr := w.addCounts(context.WithoutCancel(ctx)); cerr != nil {
			if _, ok := err.(userPanic); !ok {
				seq, err = 0, errors.Join(err, cerr)
			}
		}
	}
	if up, ok := err.(userPanic); ok {
		// The caller's own value: no recovery of the store's stands between here and the caller
		// on a foreign transaction, and inside WriteTx its function's recovery marks it again.
		panic(up.val)
	}
	return seq, err
}

func checkEnqueue(runID string, build EventBuilder) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	if build == nil {
		return errors.New("outbox: nil EventBuilder")
	}
	return nil
}

// enqueue is the one body of every enqueue, on a transaction or in a group: a once key already taken
// ends it, then the next number, the line rendered and checked, the insert. It returns the seq and the
// line's length, or seq 0 when the key was taken or build declined. ctx is the caller's: a call whose
// context has ended stores nothing. A panic of build's comes back as a userPanic error, for the
// caller's goroutine to raise.
func (s *Store) enqueue(ctx context.Context, w *txWriter, runID, onceKey string, build EventBuilder) (seq int64, size int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if onceKey != "" {
		if found, err := w.onceKeyFound(onceKey); err != nil || found {
			return 0, 0, err
		}
	}
	seq, err = w.nextSeq(runID)
	if err != nil {
		return 0, 0, err
	}
	line, err := s.render(ctx, w.group, EnqueueCall{RunID: runID, Seq: seq, OnceKey: onceKey}, build)
	if err != nil || line == nil {
		return 0, 0, err
	}
	if err := w.insert(db.EventInsertParams{
		EngineRunID: runID, Seq: seq, Line: line, AnnounceKey: onceKey, EnqueuedAt: time.Now().UnixMilli(),
	}); err != nil {
		return 0, 0, err
	}
	s.markLive(runID)
	return seq, len(line), nil
}

// render has build render seq's line and checks it: nil when build declined. A panic of build's is
// returned as a userPanic: build may run on the committer's goroutine, which must not die of it. In a
// group (g), the builder may be refused before it runs, or its group taken over while it runs (see
// takeover.go); the call then ends with errNotBuilt or errGroupTakenOver.
func (s *Store) render(ctx context.Context, g *groupRun, call EnqueueCall, build EventBuilder) (line []byte, err error) {
	runID, seq := call.RunID, call.Seq
	if g != nil {
		// The builder and the line check are the caller's code on the committer's goroutine: one
		// that calls the store is told so (ErrCallInsideTx). The mark is set for them alone, not the
		// whole group, since a concurrent caller that finds it set pays for telling its goroutine
		// from the holder's.
		defer s.wr.Release(s.wr.Hold()) // the group may have been taken over meanwhile
		if err := g.enterBuilder(seq); err != nil {
			return nil, err
		}
	}
	line, err = callBuild(build, call)
	if g != nil {
		if err := g.leaveBuilder(); err != nil {
			return nil, err
		}
	}
	switch {
	case err != nil:
		if up, ok := err.(userPanic); ok {
			return nil, up
		}
		return nil, fmt.Errorf("build line %d of run %q: %w", seq, runID, err)
	case line == nil:
		return nil, nil
	}
	if err := s.checkLine(line); err != nil {
		return nil, fmt.Errorf("line %d of run %q: %w", seq, runID, err)
	}
	if check := s.cfg.lineCheck; check != nil {
		if err := callCheck(check, runID, seq, line); err != nil {
			if up, ok := err.(userPanic); ok {
				return nil, up
			}
			return nil, fmt.Errorf("line %d of run %q: %w: %w", seq, runID, ErrInvalidLine, err)
		}
	}
	if err := ctx.Err(); err != nil {
		// Ended while the line was rendered: store nothing rather than interrupt the insert.
		return nil, err
	}
	return line, nil
}

// userPanic carries a panic of the caller's own code (a builder, a WriteTx function) through the
// store's recovery, which turns any other panic, one inside the driver or SQLite, into an error.
type userPanic struct{ val any }

func (p userPanic) Error() string { return fmt.Sprintf("outbox: the builder panicked: %v", p.val) }

// callBuild runs a builder, turning its panic into a userPanic error. A builder from RunBuilder or
// CallBuilder asks for the call's run id (and once key) by its error, and is answered here.
func callBuild(build EventBuilder, call EnqueueCall) (line []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			line, err = nil, userPanic{v}
		}
	}()
	line, err = build(call.Seq)
	if req, ok := err.(*runRequest); ok {
		return req.build(call)
	}
	return line, err
}

// callCheck runs the store's line check, turning its panic into a userPanic error, as callBuild does.
func callCheck(check func(string, int64, []byte) error, runID string, seq int64, line []byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = userPanic{v}
		}
	}()
	return check(runID, seq, line)
}

// raise re-raises a builder's panic on the caller's goroutine, as the caller's own; any other error
// is returned as it is.
func raise(err error) error {
	if up, ok := err.(userPanic); ok {
		panic(up)
	}
	return err
}

// checkLine refuses a line the journal could not hold as one line, or longer than the store's limit.
func (s *Store) checkLine(line []byte) error {
	switch {
	case len(line) == 0:
		return fmt.Errorf("%w: empty", ErrInvalidLine)
	case len(line) > s.cfg.maxLine:
		return fmt.Errorf("%w: %d bytes, the limit is %d (WithMaxLineSize)", ErrInvalidLine, len(line), s.cfg.maxLine)
	case bytes.IndexByte(line, '\n') >= 0:
		return fmt.Errorf("%w: it holds a newline", ErrInvalidLine)
	}
	return nil
}

// MarkAnnounced records in the ledger that the lines of runID named in keyBySeq have reached the
// journal, each under its once key. Call it only after the journal has the lines. The batch is one
// transaction: marking an event with the key it already holds is a no-op, and a key that another
// event holds (ErrAnnounceConflict), an event that already holds another key (ErrAnnounceConflict) or
// a seq without a row (ErrUnknownEvent) fails the call and marks nothing.
func (s *Store) MarkAnnounced(ctx context.Context, runID string, keyBySeq map[int64]string) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	for seq, key := range keyBySeq {
		if err := checkOnceKey(key); err != nil {
			return fmt.Errorf("mark line %d of run %q: %w", seq, runID, err)
		}
	}
	if len(keyBySeq) == 0 {
		return nil
	}
	return s.write(ctx, durable, func(w *txWriter) error {
		return s.markAnnounced(w.ctx, w.tx, runID, keyBySeq)
	})
}

func (s *Store) markAnnounced(ctx context.Context, tx *sql.Tx, runID string, keyBySeq map[int64]string) error {
	for _, seq := range slices.Sorted(maps.Keys(keyBySeq)) {
		key := keyBySeq[seq]
		n, err := s.q.EventMarkAnnounced(ctx, tx, db.EventMarkAnnouncedParams{OnceKey: key, EngineRunID: runID, Seq: seq})
		if err != nil {
			return fmt.Errorf("mark line %d of run %q announced as %q: %w", seq, runID, key, mapErr(ctx, err))
		}
		if n == 1 {
			continue
		}
		row, err := s.q.EventOnceKey(ctx, tx, db.EventOnceKeyParams{EngineRunID: runID, Seq: seq})
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("mark line %d of run %q announced: %w", seq, runID, ErrUnknownEvent)
		case err != nil:
			return fmt.Errorf("mark line %d of run %q announced: %w", seq, runID, mapErr(ctx, err))
		}
		held := row.OnceKey
		if held == "" || held == key {
			held = row.AnnounceKey
		}
		if held != "" && held != key {
			return fmt.Errorf("mark line %d of run %q announced as %q: it holds %q: %w",
				seq, runID, key, held, ErrAnnounceConflict)
		}
		// The row is free: another row holds the key pending.
		other, err := s.q.EventKeyHolder(ctx, tx, key)
		if err != nil {
			return fmt.Errorf("mark line %d of run %q announced as %q: %w", seq, runID, key, mapErr(ctx, err))
		}
		return fmt.Errorf("mark line %d of run %q announced as %q: line %d of run %q holds it pending: %w",
			seq, runID, key, other.Seq, other.EngineRunID, ErrAnnounceConflict)
	}
	return nil
}

// AnnouncedOnceKeys returns the ledger: every key that MarkAnnounced recorded, that is every event a
// reader has been told of. Keys of events merely enqueued are not in it.
func (s *Store) AnnouncedOnceKeys(ctx context.Context) (map[string]bool, error) {
	var keys []string
	err := s.read(ctx, func(ctx context.Context) (err error) {
		keys, err = s.q.EventsAnnouncedKeys(ctx, s.r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

// PendingEvents returns at most limit of runID's stored lines with seq > after, in seq order. A
// once-keyed line the relay has recorded projected is not among them: its row keeps its key and
// digest (LineDigest), and the journal its bytes. A limit
// below 1 is ErrInvalidLimit: a relay whose journal refuses writes re-reads the same prefix on every
// attempt, and only a bound keeps that attempt's cost fixed as the backlog grows.
func (s *Store) PendingEvents(ctx context.Context, runID string, after int64, limit int) ([]EventLine, error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, ErrInvalidLimit
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
