// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/litedb"
)

// WriteTx runs fn in one write transaction (BEGIN IMMEDIATE on the writer connection) and commits it
// when fn returns nil. fn's error is returned as it is (joined with syscall.ENOSPC when it is an I/O
// error of SQLite's on a full file system, as every write's is, and with ctx's error when it is a
// statement ctx interrupted, SQLITE_INTERRUPT, which alone says nothing a caller branches on); if fn
// panics, the transaction is rolled back and the panic continues. Use EnqueueTx inside fn to make
// events commit with the caller's own writes.
// It returns once the commit is durable (at DurabilityFull); the writer goes to the next caller as
// soon as COMMIT returns, so concurrent callers share WAL syncs instead of taking one each in turn.
//
// fn must not call the store's other write methods: the store has one writer connection, which fn
// already holds. Such a call fails at once with ErrCallInsideTx (see there for the one case that cannot
// be caught). Reads work inside fn; ReadTx reads the committed book beside it.
func (s *Store) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return errors.New("outbox: WriteTx with a nil function")
	}
	return s.write(ctx, durable, func(w *txWriter) (err error) {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(userPanic); ok {
					panic(v)
				}
				panic(userPanic{v})
			}
		}()
		return litedb.Interrupted(w.ctx, fn(w.tx))
	})
}

// commitMode says whether a write returns only once its commit is durable.
type commitMode int

const (
	durable commitMode = iota
	// relaxed is for a transaction whose loss on power failure costs nothing but repeated work: the
	// write returns without waiting for the WAL sync and becomes durable with the next commit that
	// does wait (the WAL is appended in order). The relay's progress record is the one such
	// transaction: if power takes it (with the records before it, back to the last commit that waited
	// for a sync), the relay re-sends those batches, byte for byte, and their once keys, still
	// pending, are marked again. At FULL that saves one of the two fdatasyncs per
	// batch. Its function is the store's own and calls none of the caller's code.
	relaxed
)

// write runs fn in a write transaction on the writer connection and commits it; a durable write
// returns only once the commit is durable (see durability). It is every write of the store's but the
// group committer's.
//
// The caller's context never reaches the transaction itself, only its statements (through w.ctx,
// which carries the operation timeout). database/sql rolls a transaction back and closes its
// connection when the transaction's context ends mid-way (the driver cannot vouch for a reused
// session), and this is the store's one writer connection, whose WAL handle the store syncs: a
// cancelled call would take the store down with it. So the transaction is begun without
// cancellation, the context is checked between steps and before COMMIT, and a statement it
// interrupts fails that statement. COMMIT itself is never interrupted: once begun, the call's outcome
// is the commit's.
func (s *Store) write(ctx context.Context, mode commitMode, fn func(w *txWriter) error) (err error) {
	if err := s.enter(true); err != nil {
		return err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	defer func() { err = s.named(err) }()
	defer s.recoverDriver(&err)
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := s.checkNotInsideTx(); err != nil {
		return err
	}
	// The wait for the writer connection, held by another transaction, is the caller's and ends
	// with its context; the transaction begun on it is not (see above).
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("wait for the writer: %w", mapErr(ctx, err))
	}
	// Given back once the transaction has ended; after a panic inside the driver it is kept, since
	// giving back a connection in a transaction that never ended would wait forever.
	ended := false
	defer func() {
		if ended {
			conn.Close()
		}
	}()
	var g int64
	if mode != relaxed {
		// A relaxed write runs none of the caller's code (see relaxed), so nothing can call the store
		// on this goroutine while it holds the writer, and it skips the mark.
		g = s.wr.Hold()
		defer func() {
			if g != 0 {
				s.wr.Release(g) // before the writer is given back
			}
		}()
	}
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		ended = true
		return fmt.Errorf("begin: %w", mapErr(ctx, err))
	}
	w := s.newTxWriter(ctx, tx, s.stmts, &lineCounts{})
	s.current.Store(&ownTx{tx: tx, counts: w.counts})
	done := false
	defer func() {
		s.current.Store(nil)
		if done {
			return
		}
		if v := recover(); v != nil {
			if _, ok := v.(userPanic); !ok {
				// A panic inside the driver or SQLite: the connection's state is unknown, and a
				// rollback on it could wait forever. recoverDriver takes it from here.
				panic(v)
			}
			s.rollback(tx)
			ended = true
			panic(v)
		}
		// Runs on every error, so the writer connection is never left inside a transaction.
		s.rollback(tx)
		ended = true
	}()
	if err := fn(w); err != nil {
		return err
	}
	if err := endOf(ctx); err != nil {
		// Ended while fn ran: the caller will be told it failed, so nothing of it may commit.
		return err
	}
	if err := s.txLost(); err != nil {
		return err
	}
	// The transaction's EnqueueTx calls are done: no other goroutine counts into it from here.
	s.current.Store(nil)
	if err := w.addCounts(ctx); err != nil {
		return err
	}
	faultpoint.Hit(faultpoint.BeforeCommit)
	done = true
	t, err := s.commitTx(tx, mode, 0)
	ended = true
	if err != nil {
		return fmt.Errorf("commit: %w", mapErr(ctx, err))
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	s.signalCommit()
	// The writer is given back before the wait for the WAL sync, not after it: the next caller's
	// transaction then commits while this one's sync runs, and a later sync covers both. Held
	// through the wait, the writer made concurrent WriteTx and EnqueueTx callers take one sync each,
	// in turn, as if there were one of them.
	s.current.Store(nil)
	if g != 0 {
		s.wr.Release(g)
		g = 0
	}
	ended = false
	conn.Close()
	if err := t.wait(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// txLost reports a transaction that SQLite has already rolled back: an interrupted write statement
// (or a full disk, or an I/O error) ends the whole transaction, and later statements would each
// commit on their own. Checked before anything more is written or committed in it.
func (s *Store) txLost() error {
	if s.wr.Lost() {
		return errTxLost
	}
	return nil
}

var errTxLost = errors.New("outbox: the transaction ended before the store committed it (a statement in it was interrupted or failed, or it was committed or rolled back inside the function); nothing of it is stored")

// markLive records that runID was enqueued to through this store, so that Recover never takes it for
// an earlier process's run.
func (s *Store) markLive(runID string) {
	s.liveMu.Lock()
	if _, ok := s.live[runID]; !ok {
		s.live[runID] = struct{}{}
	}
	s.liveMu.Unlock()
}

func (s *Store) isLive(runID string) bool {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	_, ok := s.live[runID]
	return ok
}

// commitTx commits tx, a transaction of the store's own on the writer connection, whose commit hook
// refuses every other commit. A durable commit takes a ticket to wait on (see durability.commit),
// which covers calls of the group committer's; a relaxed one takes none: nothing waits for it, and a
// reader that saw it need not wait for a sync on its account.
func (s *Store) commitTx(tx *sql.Tx, mode commitMode, calls int) (ticket, error) {
	if mode == relaxed {
		return ticket{}, s.wr.Commit(tx.Commit)
	}
	var t ticket
	err := s.wr.Commit(func() (err error) {
		t, err = s.dur.commit(calls, tx.Commit)
		return err
	})
	return t, err
}

func (s *Store) rollback(tx *sql.Tx) {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		s.log.Warn("outbox: rollback failed", "err", err)
	}
}

// recoverDriver turns a panic inside the driver or SQLite into an error for the call that met it, and
// breaks the store: the connection it happened on is in an unknown state, so every later call gets
// ErrStoreBroken and Close returns without waiting on it. A panic of the caller's own code (userPanic)
// goes on, as the caller's, with its own value. Deferred with the call's error.
func (s *Store) recoverDriver(err *error) {
	v := recover()
	if v == nil {
		return
	}
	if up, ok := v.(userPanic); ok {
		panic(up.val)
	}
	*err = s.breakDown(v)
}

// breakDown records that the store cannot go on after a panic inside the driver or SQLite.
func (s *Store) breakDown(v any) error {
	err := fmt.Errorf("%w: %v", ErrStoreBroken, v)
	s.mu.Lock()
	if s.broken == nil {
		s.broken = err
		s.log.Error("outbox: the store failed inside SQLite; it refuses every call until reopened", "err", err)
	}
	s.mu.Unlock()
	return err
}
