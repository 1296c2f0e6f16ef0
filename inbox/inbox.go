// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/textmachine/outbox/inbox/internal/db"
	"github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/diskfull"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/litedb"
)

// Inbox applies journal lines exactly once into the consumer's own SQLite database. It is the
// database's only writer: it holds an exclusive lock on the file while open, writes through one
// connection, one transaction per call, and reads through a separate pool that never waits for the
// writer. All methods are safe for concurrent use; write calls are serialized.
type Inbox struct {
	path string
	cfg  config
	q    *db.Queries
	w    *sql.DB // one connection
	r    *sql.DB // the read pool
	lock *os.File
	st   *litedb.Statements
	// unmarked: opened read-only beside a database of an earlier release, whose sources have no
	// rewound mark (migration 3): none of them is rewound with a position kept.
	unmarked bool
	// uncounted: opened read-only beside a database of an earlier release, which keeps no counts
	// (migration 4): Totals says so instead of reading a table that is not there.
	uncounted bool

	// writer is held by the one write transaction in progress; waiting for it honours the caller's
	// context.
	writer chan struct{}
	// wr is the writer connection as the driver has it: only the inbox's own commit goes through on
	// it (a handler's tx.Commit becomes a rollback, which the inbox then reports), and it marks the
	// goroutine that holds it while a write transaction is open, and the context a handler is given,
	// so that a call that writes made from there is refused (ErrCallInsideTx) rather than left waiting
	// for itself. handling says whether a handler is running on that goroutine.
	wr       litedb.Writer
	handling atomic.Bool
	// readers marks the goroutines running a ReadTx function, so that a Close or a read made from
	// inside one is refused rather than left waiting for the call it is part of.
	readers litedb.Holders
	// nextTrim is when a run can next have become idle past the retention (unix nanoseconds); kept
	// under the writer.
	nextTrim int64
	// regMu makes a journal source's check of its stored position and its registration one step,
	// and a Release's lowering of the registrations another: a rewind falls before or after both.
	regMu sync.Mutex

	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup
}

// Open opens the consumer's database at path, creating the file if it is missing and applying the
// inbox's migrations (its own goose version table, inbox_db_version). It fails with ErrLocked, at
// once, when another Inbox in this or another process has the database open; with
// ErrOutboxDatabase for a database that holds an outbox's tables; with ErrHardLinked for a file with
// more than one name. The database is put in WAL mode.
func Open(ctx context.Context, path string, opts ...Option) (*Inbox, error) {
	in, err := open(ctx, path, opts)
	// A full disk may fail the first write SQLite makes (the WAL mode, a migration) as an I/O error.
	return in, diskfull.Named(path, err)
}

func open(ctx context.Context, path string, opts []Option) (*Inbox, error) {
	if path == "" {
		return nil, errors.New("inbox: empty database path")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	if cfg.operator == "" {
		cfg.operator = osUser()
	}
	in := &Inbox{path: path, cfg: cfg, q: db.New(), writer: make(chan struct{}, 1)}
	var file os.FileInfo
	if in.lock, file, _, err = litedb.Lock(path, lockNames); err != nil {
		if errors.Is(err, ErrLocked) && isBook(ctx, path) {
			return nil, &heldBook{path}
		}
		return nil, err
	}
	if err := in.openWriter(ctx, file); err != nil {
		in.release()
		return nil, fmt.Errorf("inbox: open %s: %w", path, withCtx(ctx, err))
	}
	if in.r, err = litedb.OpenReader(path, in.dbConfig(), file); err != nil {
		in.release()
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	cfg.logger.Debug("inbox: opened", "path", path, "durability", cfg.durability)
	return in, nil
}

// lockNames are the inbox's words for a lock that is not to be had.
var lockNames = litedb.Names{Prefix: "inbox: ", Locked: ErrLocked, HardLinked: ErrHardLinked}

// dbConfig is what the floor's connections take from the options.
func (in *Inbox) dbConfig() litedb.Config {
	return litedb.Config{BusyTimeout: in.cfg.busyTimeout, ReadPool: in.cfg.readPool, VFS: in.cfg.vfs}
}

// openWriter opens the writer connection, at SQLite's own FULL or NORMAL, refuses a book, migrates
// and prepares the statements; from then on only the inbox commits on it (litedb.Writer.Attach).
func (in *Inbox) openWriter(ctx context.Context, file os.FileInfo) error {
	sync := "FULL"
	if in.cfg.durability == DurabilityNormal {
		sync = "NORMAL"
	}
	var err error
	if in.w, err = litedb.OpenWriter(in.path, in.dbConfig(), file, sync, nil); err != nil {
		return err
	}
	if err := in.w.PingContext(ctx); err != nil {
		return err
	}
	var n int
	if err := in.w.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name IN ('events_outbox', 'outbox_progress', ?)`, outboxVersionTable).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: it is a book; give the inbox a database of its own", ErrOutboxDatabase)
	}
	if err := migrations.Up(ctx, in.w); err != nil {
		return err
	}
	if in.st, err = litedb.Prepare(ctx, in.w, stmtSQL[:]); err != nil {
		return err
	}
	return in.wr.Attach(ctx, in.w, nil)
}

// outboxVersionTable is the outbox's goose version table, which a book has from its first migration.
const outboxVersionTable = "outbox_db_version"

// osUser names the operating system's user, for the record of an accepted gap.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// Close waits for the calls in progress, closes the database and releases the lock. Calls after
// Close return ErrClosed; Close itself may be called again and returns nil. Called from inside a call
// of the inbox (a WriteTx or ReadTx function, a handler), which it would wait for, it fails at once
// with ErrCallInsideTx and closes nothing.
func (in *Inbox) Close() error {
	if in.insideCall() {
		return errCloseInside
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	in.mu.Unlock()
	in.ops.Wait()
	return in.release()
}

// release closes what the inbox holds, the lock last, so that the next Open cannot meet one of its
// connections still open.
func (in *Inbox) release() error {
	var errs []error
	if in.st != nil {
		in.st.Close()
	}
	if in.r != nil {
		errs = append(errs, in.r.Close())
	}
	if in.w != nil {
		errs = append(errs, in.w.Close())
	}
	if in.lock != nil {
		errs = append(errs, litedb.Unlock(in.lock))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("inbox: close %s: %w", in.path, err)
	}
	return nil
}

// enter registers a call so that Close waits for it.
func (in *Inbox) enter(ctx context.Context) error {
	if in.wr.Marked(ctx) {
		return ErrInHandler
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	in.ops.Add(1)
	return nil
}

func (in *Inbox) exit() { in.ops.Done() }

// WriteTx runs fn in one write transaction of the inbox (BEGIN IMMEDIATE on its writer connection)
// and commits it when fn returns nil: the consumer's own schema and writes, outside any line. fn's
// error is returned as it is (wrapped in ErrTxEnded if fn also ended the transaction); if fn panics,
// the transaction is rolled back and the panic goes on. fn must not commit or roll back tx
// (ErrTxEnded), nor call the inbox's write methods: the inbox has one writer, which fn holds, so such
// a call fails at once with ErrCallInsideTx, whatever its context. For reads, use ReadTx.
func (in *Inbox) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return errors.New("inbox: WriteTx with a nil function")
	}
	return in.write(ctx, func(t *txn) error {
		err := fn(t.tx)
		if aerr := t.alive(); aerr != nil {
			if err != nil {
				return fmt.Errorf("%w (the function returned: %w)", aerr, err)
			}
			return aerr
		}
		return err
	})
}

// write runs fn in the write transaction and commits it. The caller's context bounds the wait for
// the writer and every statement, never the transaction itself: database/sql closes a transaction's
// connection when the transaction's context ends mid-way, and the inbox keeps its one writer
// connection. So the transaction is begun without cancellation and the context is checked before
// COMMIT; once COMMIT has begun, the call's outcome is the commit's.
func (in *Inbox) write(ctx context.Context, fn func(t *txn) error) error {
	return diskfull.Named(in.path, withCtx(ctx, in.writeTxn(ctx, fn)))
}

func (in *Inbox) writeTxn(ctx context.Context, fn func(t *txn) error) error {
	if err := in.checkNotInsideTx(ctx); err != nil {
		return err
	}
	if err := in.enter(ctx); err != nil {
		return err
	}
	defer in.exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case in.writer <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-in.writer }()
	conn, err := in.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: wait for the writer: %w", err)
	}
	defer conn.Close()
	tx, err := litedb.Begin(ctx, conn)
	if err != nil {
		return fmt.Errorf("inbox: begin: %w", err)
	}
	g := in.wr.Hold()
	released := false
	release := func() {
		if !released {
			released = true
			in.handling.Store(false)
			in.wr.Release(g)
		}
	}
	defer release() // before the writer is given back
	done := false
	defer func() {
		// Also on a panic, which then goes on: nothing of the call is stored.
		if !done {
			if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
				in.cfg.logger.Warn("inbox: rollback failed", "err", err)
			}
		}
	}()
	t := newTxn(ctx, in, tx)
	defer t.close()
	if err := fn(t); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := t.alive(); err != nil {
		return err
	}
	release() // the caller's code has run: the commit is the inbox's own
	faultpoint.Hit(faultpoint.InboxBeforeCommit)
	err = in.wr.Commit(tx.Commit)
	done = true
	if err != nil {
		return fmt.Errorf("inbox: commit: %w", err)
	}
	t.committed()
	faultpoint.Hit(faultpoint.InboxAfterCommit)
	return nil
}

// read runs fn on the read pool. A reader of a -shm it cannot write (OpenReadOnly beside a running
// consumer) may find the WAL index header half rewritten by a commit (SQLITE_READONLY_RECOVERY) or no
// read mark it may use just after a WAL restart (SQLITE_READONLY_CANTINIT); it has read nothing then,
// and the same read again succeeds, so fn runs again, a bounded number of times.
func (in *Inbox) read(ctx context.Context, fn func() error) error {
	if in.insideRead() {
		return errReadInsideRead
	}
	return withCtx(ctx, in.readAgain(ctx, fn))
}

func (in *Inbox) readAgain(ctx context.Context, fn func() error) error {
	if err := in.enter(ctx); err != nil {
		return err
	}
	defer in.exit()
	return litedb.ReadAgain(ctx, func(context.Context) error { return fn() })
}
