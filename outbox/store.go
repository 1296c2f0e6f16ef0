// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/diskfull"
	"github.com/textmachine/outbox/internal/litedb"
	"github.com/textmachine/outbox/migrations"
)

// Store is one book's outbox: an SQLite database holding the events_outbox table.
//
// A Store opened with Open is the database's only writer: it holds an exclusive lock on the file for
// its lifetime, writes through a single connection with BEGIN IMMEDIATE, and reads through a separate
// pool. A Store opened with OpenReadOnly only reads. All methods are safe for concurrent use.
type Store struct {
	path     string
	cfg      config
	log      *slog.Logger
	q        *db.Queries
	w        *sql.DB // nil when read-only
	r        *sql.DB
	lock     *os.File    // the writer's lock; nil when read-only
	file     os.FileInfo // the database file as Open or OpenReadOnly found it, for every connection to be on
	readOnly bool
	stmts    *litedb.Statements // prepared on the writer connection (stmtSQL); nil when read-only
	group    *committer         // nil when read-only
	dur      *durability
	pr       pendingReader
	proj     projections // the relays' turns per run, and the batches Close waits for

	// wr is the writer connection as the driver has it, kept to ask SQLite whether a transaction is
	// still open (an interrupted write statement rolls the whole transaction back), with the guard
	// that lets only the store commit on it and the mark of the goroutine that runs the caller's code
	// holding it (ErrCallInsideTx). The store never lets database/sql replace that connection; see
	// write.
	wr litedb.Writer
	// addLines is the figures' upsert, prepared on the writer connection at its first use (see
	// rawAddLines).
	addLines rawAddLines
	// current is the transaction write has open, so that EnqueueTx can tell the store's own transaction
	// from a foreign one, and count its lines with the transaction's (see lineCounts).
	current atomic.Pointer[ownTx]

	liveMu sync.Mutex
	live   map[string]struct{} // runs enqueued to since Open: Recover leaves them alone

	mu       sync.Mutex
	cond     *sync.Cond // signalled when inflight drops to zero
	inflight int
	closed   bool
	broken   error         // a panic inside the driver or SQLite; see breakDown
	changed  chan struct{} // closed and replaced after every commit through the store

	// incrementalVacuum is true when the book gives free pages back to the file system
	// (giveBackPages): auto_vacuum=INCREMENTAL, set when the book was created, or by a VACUUM.
	incrementalVacuum atomic.Bool
}

// Migrate applies the outbox migrations to a database the caller owns, with the same embedded files
// and version table that Open uses.
func Migrate(ctx context.Context, sqlDB *sql.DB) error {
	return migrations.Up(ctx, sqlDB)
}

// Open opens the outbox database at path for writing, creating the file if it is missing and applying
// any pending migrations. It fails with ErrLocked, at once, when another Store in this or another
// process holds the database, and refuses a path that is not a regular file.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	s, err := open(ctx, path, opts)
	// A full disk may fail the first write SQLite makes (the WAL mode, a migration) as an I/O error.
	return s, diskfull.Named(path, err)
}

func open(ctx context.Context, path string, opts []Option) (*Store, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if s.lock, s.file, _, err = litedb.Lock(path, lockNames); err != nil {
		return nil, err
	}
	// One writer connection: every sequence number is assigned under it, so a transaction sees
	// MAX(seq)=N only after the one that took N has committed. NORMAL at either durability: at FULL
	// the store syncs the WAL itself after each commit, outside SQLite's write lock (see durability).
	s.w, err = litedb.OpenWriter(path, s.dbConfig(), s.file, "NORMAL", func(c *sqlite3.Conn) error {
		if err := incrementalIfNew(c); err != nil {
			return err
		}
		return c.Exec(fmt.Sprintf("PRAGMA journal_size_limit=%d", s.cfg.walLimit))
	})
	if err != nil {
		s.release()
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	if err := s.w.PingContext(octx); err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, mapErr(octx, err))
	}
	if err := refuseInbox(octx, s.w, path); err != nil {
		s.release()
		return nil, mapErr(octx, err)
	}
	if err := migrations.Up(octx, s.w); err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, mapErr(octx, err))
	}
	var autoVacuum int
	if err := s.w.QueryRowContext(octx, "PRAGMA auto_vacuum").Scan(&autoVacuum); err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, mapErr(octx, err))
	}
	s.incrementalVacuum.Store(autoVacuum == 2)
	if err := s.attachWriter(octx); err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if s.r, err = litedb.OpenReader(path, s.dbConfig(), s.file); err != nil {
		s.release()
		return nil, err
	}
	if s.stmts, err = litedb.Prepare(octx, s.w, stmtSQL[:]); err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s.group = newCommitter(s)
	s.log.Debug("outbox: opened", "path", path, "durability", s.cfg.durability)
	return s, nil
}

// OpenReadOnly opens an existing outbox database for reading only. It takes no writer lock, so it works
// beside a Store that has the database open for writing, and sees what that store has committed. It
// writes nothing, needs write access to nothing (the directory, the database, its -wal or -shm), and
// leaves a book no writer holds open, a crashed one included, exactly as it was (see "Readers write nothing" in the package doc). It
// refuses a path that is not a regular file. Its write methods return ErrReadOnly.
func OpenReadOnly(ctx context.Context, path string, opts ...Option) (*Store, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	s.readOnly = true
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if s.file, err = litedb.RegularFile(path); err != nil {
		return nil, err
	}
	if s.r, err = litedb.OpenReadOnlyPool(path, s.dbConfig(), s.file); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	err = litedb.ReadAgain(octx, func(ctx context.Context) error {
		var n int
		err := s.r.QueryRowContext(ctx,
			`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'events_outbox'`).Scan(&n)
		switch {
		case err == nil && n == 0:
			return fmt.Errorf("%w: %w", ErrSchemaMismatch, litedb.ErrNoTables)
		case err == nil:
			return migrations.Check(ctx, s.r)
		}
		return err
	})
	if err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, mapErr(octx, err))
	}
	return s, nil
}

func newStore(path string, opts []Option) (*Store, error) {
	if path == "" {
		return nil, errors.New("outbox: empty database path")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, cfg: cfg, log: cfg.logger, q: db.New(), changed: make(chan struct{}), dur: newDurability(),
		live: map[string]struct{}{}}
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

// dbConfig is what the floor's connections take from the options.
func (s *Store) dbConfig() litedb.Config {
	return litedb.Config{BusyTimeout: s.cfg.busyTimeout, ReadPool: s.cfg.readPool, VFS: s.cfg.vfs}
}

// lockNames are the store's words for a writer's lock that is not to be had.
var lockNames = litedb.Names{Prefix: "", Locked: ErrLocked, HardLinked: ErrHardLinked}

// incrementalIfNew sets auto_vacuum=INCREMENTAL on a book that has no table yet, before the
// migrations create them: a new book then gives its free pages back as it forgets (giveBackPages).
// On a book with tables the mode changes only with a VACUUM (see the README), and setting it would
// write the header at every open, so it is left alone.
func incrementalIfNew(c *sqlite3.Conn) error {
	stmt, _, err := c.Prepare("SELECT count(*) FROM sqlite_schema")
	if err != nil {
		return err
	}
	defer stmt.Close()
	if !stmt.Step() {
		return stmt.Err()
	}
	if stmt.ColumnInt64(0) != 0 {
		return nil
	}
	return c.Exec("PRAGMA auto_vacuum=INCREMENTAL")
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close waits for operations in flight, closes the connections and releases the writer lock. Calls
// after Close return ErrClosed; Close itself may be called again and returns nil. A relay's batch that
// the sink is appending when Close begins is waited for until it is recorded, for up to the operation
// timeout (WithOpTimeout; DefaultOpTimeout when that is 0); no relay starts another append.
//
// Close waits for a group commit's builders up to the same time: once it has passed, a builder still
// running is given up on (its call fails with ErrBuilderStuck, the calls grouped with it commit) and
// the calls still queued fail with ErrClosed; Close then returns an error wrapping ErrBuilderStuck,
// naming each builder the store gave up on (then or earlier) that has not returned, after closing
// everything all the same. A WriteTx function, or a builder without group commit, runs on its
// caller's goroutine, inside the call Close waits for.
func (s *Store) Close() error {
	wait := s.closeWait()
	giveUp := time.Now().Add(wait)
	s.proj.shutdown(wait)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.inflight > 0 && s.group != nil {
		t := time.AfterFunc(time.Until(giveUp), s.group.giveUp)
		defer t.Stop()
	}
	for s.inflight > 0 {
		s.cond.Wait()
	}
	close(s.changed) // wakes anyone waiting for a commit; they will find the store closed
	s.mu.Unlock()
	var stuck error
	if s.group != nil {
		s.group.close()
		stuck = s.group.stuckErr()
	}
	err := s.release()
	if stuck != nil {
		return errors.Join(fmt.Errorf("close %s: %w", s.path, stuck), err)
	}
	return err
}

// release closes what the store holds, the writer lock last, so that a following Open cannot meet a
// connection of this store still open on the file.
func (s *Store) release() error {
	if s.stmts != nil {
		s.stmts.Close()
	}
	errs := []error{s.pr.close(), s.addLines.close()}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.lock != nil {
		errs = append(errs, litedb.Unlock(s.lock))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %s: %w", s.path, err)
	}
	return nil
}

// enter registers an operation so that Close waits for it. It fails once the store is closed.
func (s *Store) enter(write bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.broken != nil {
		return s.broken
	}
	if write && s.readOnly {
		return ErrReadOnly
	}
	if write {
		if err := s.dur.broken(); err != nil {
			return err
		}
	}
	s.inflight++
	return nil
}

func (s *Store) exit() {
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 {
		s.cond.Broadcast()
	}
	s.mu.Unlock()
}

// opContext applies the operation timeout to a context without a deadline. Otherwise the context is
// used as it is: a cancellable context costs every transaction a watcher goroutine in database/sql and
// every statement the driver's interrupt checks, which WithOpTimeout(0) lets a caller avoid. The
// timeout stands in for the caller's deadline, so its passing is context.DeadlineExceeded; its cancel
// is not the caller's end (see bounded).
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || s.cfg.opTimeout <= 0 {
		return ctx, func() {}
	}
	return bounded(ctx, s.cfg.opTimeout, nil)
}

// nextCommit returns a channel that is closed at the next commit made through this store (or when the
// store is closed). A relay waits on it instead of polling; take a fresh channel after each wake-up.
// Commits made on transactions the store did not begin (EnqueueTx on a foreign *sql.Tx) do not
// signal it.
func (s *Store) nextCommit() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Store) signalCommit() {
	s.mu.Lock()
	if !s.closed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
}

// read runs fn on the read pool with the operation timeout.
func (s *Store) read(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if err := s.enter(false); err != nil {
		return err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	defer s.recoverDriver(&err)
	if !s.readOnly {
		return mapErr(ctx, fn(ctx))
	}
	return mapErr(ctx, litedb.ReadAgain(ctx, fn))
}

// refuseInbox refuses a consumer's database before the migrations write a table into it: a book's
// tables beside an inbox's would make the inbox refuse its own database from then on (it takes a
// database holding an outbox's tables for a book), losing the consumer its exactly-once record.
func refuseInbox(ctx context.Context, db *sql.DB, path string) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name IN ('inbox_db_version', 'inbox_runs')`).Scan(&n); err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %s is a consumer's database (it holds an inbox), not a book; nothing was changed", ErrInboxDatabase, path)
	}
	return nil
}
