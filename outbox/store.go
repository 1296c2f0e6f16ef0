// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/dirsync"
	"github.com/textmachine/outbox/internal/diskfull"
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
	lock     *os.File    // the writer lock; nil when read-only
	file     os.FileInfo // the database file as Open or OpenReadOnly found it, for every connection to be on
	readOnly bool
	stmts    *statements // prepared on the writer connection; nil when read-only
	group    *committer  // nil when read-only
	dur      *durability
	pr       pendingReader
	proj     projections // the relays' turns per run, and the batches Close waits for

	// wconn is the writer connection as the driver has it, kept to ask SQLite whether a transaction is
	// still open (an interrupted write statement rolls the whole transaction back). The store never
	// lets database/sql replace that connection; see write.
	wconn *sqlite3.Conn
	// addLines is the figures' upsert, prepared on wconn at its first use (see rawAddLines).
	addLines rawAddLines
	// current is the transaction write has open, so that EnqueueTx can tell the store's own transaction
	// from a foreign one, and count its lines with the transaction's (see lineCounts).
	current atomic.Pointer[ownTx]
	// writerG is the goroutine that holds the writer connection in a transaction while the caller's
	// code runs in it (0: none), so that a write called on it fails at once instead of waiting for
	// itself (ErrCallInsideTx).
	writerG atomic.Int64
	// committing is true while the store itself commits on the writer connection; any other commit
	// there is refused (see attachWriter).
	committing atomic.Bool

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
	_, statErr := regularFile(path)
	created := errors.Is(statErr, os.ErrNotExist)
	if statErr != nil && !created {
		return nil, statErr
	}
	if s.lock, err = lockFile(path); err != nil {
		return nil, err
	}
	// The file locked is the one checked: a name replaced in between is refused.
	if s.file, err = s.lock.Stat(); err == nil && !s.file.Mode().IsRegular() {
		err = notRegular(path, s.file)
	}
	if err != nil {
		s.release()
		return nil, err
	}
	if created {
		// The directory entry of a new file is durable only once its directory is synced.
		if err := dirsync.Sync(filepath.Dir(path)); err != nil {
			s.release()
			return nil, err
		}
	}
	s.w, err = openDB(path, s.query("_txlock=immediate"), func(c *sqlite3.Conn) error {
		if err := s.onFile(c); err != nil {
			return err
		}
		if err := c.BusyTimeout(s.cfg.busyTimeout); err != nil {
			return err
		}
		// NORMAL at either durability: at FULL the store syncs the WAL itself after each commit,
		// outside SQLite's write lock (see durability). It is set on every connection, since a
		// connection's level is its own.
		if err := incrementalIfNew(c); err != nil {
			return err
		}
		return c.Exec(fmt.Sprintf("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=%d", s.cfg.walLimit))
	})
	if err != nil {
		s.release()
		return nil, err
	}
	// One writer connection: every sequence number is assigned under it, so a transaction sees
	// MAX(seq)=N only after the one that took N has committed.
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	octx, cancel := s.opContext(ctx)
	defer cancel()
	if err := s.w.PingContext(octx); err != nil {
		s.release()
		return nil, fmt.Errorf("open %s: %w", path, mapErr(octx, err))
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
	if s.r, err = s.openReader(); err != nil {
		s.release()
		return nil, err
	}
	if s.stmts, err = prepareStatements(octx, s.w); err != nil {
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
	if s.file, err = regularFile(path); err != nil {
		return nil, err
	}
	if s.r, err = s.openReadOnlyPool(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	err = readAgain(octx, func(ctx context.Context) error {
		var n int
		err := s.r.QueryRowContext(ctx,
			`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'events_outbox'`).Scan(&n)
		switch {
		case err == nil && n == 0:
			return ErrNoSchema
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

// openReader opens the read pool. mode=ro: a read connection never creates the file, never writes to
// it, and as the last connection to close does not checkpoint the WAL into it.
func (s *Store) openReader() (*sql.DB, error) {
	r, err := openDB(s.path, s.query("mode=ro&_txlock=deferred"), func(c *sqlite3.Conn) error {
		if err := s.onFile(c); err != nil {
			return err
		}
		if err := privateIndex(c); err != nil {
			return err
		}
		if err := c.BusyTimeout(s.cfg.busyTimeout); err != nil {
			return err
		}
		return c.Exec("PRAGMA query_only=1")
	})
	if err != nil {
		return nil, err
	}
	r.SetMaxOpenConns(s.cfg.readPool)
	r.SetMaxIdleConns(s.cfg.readPool)
	return r, nil
}

// query adds the configured VFS, if any, to a DSN query.
func (s *Store) query(q string) string {
	if s.cfg.vfs != "" {
		return q + "&vfs=" + url.QueryEscape(s.cfg.vfs)
	}
	return q
}

// openDB opens path through the driver with an init callback for the pragmas. Pragmas go through the
// callback, not the DSN, so no DSN spelling can make them silently ignored.
func openDB(path, query string, init func(*sqlite3.Conn) error) (*sql.DB, error) {
	u := url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: query}
	c, err := (&driver.SQLite{}).OpenConnector(u.String())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return sql.OpenDB(memConnector{c, init}), nil
}

// connMemory is the memory each SQLite connection may use. SQLite holds a line whole while it writes
// or reads it, and a transaction's pages and a b-tree's neighbouring cells besides; the driver's
// default of 256 MiB left a few large lines able to exhaust it, and the driver panics when SQLite runs
// out. The space is reserved, not used: a connection commits memory only as it grows.
const connMemory = 1 << 30

// memConnector opens the driver's connections with connMemory and runs init on each.
type memConnector struct {
	sqldriver.Connector
	init func(*sqlite3.Conn) error
}

func (m memConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	c, err := m.Connector.Connect(sqlite3.WithMaxMemory(ctx, connMemory))
	if err != nil {
		return nil, err
	}
	if err := m.init(c.(driver.Conn).Raw()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

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
		s.stmts.close()
	}
	errs := []error{s.pr.close(), s.addLines.close()}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.lock != nil {
		errs = append(errs, unlockFile(s.lock))
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

// Changed returns a channel that is closed at the next commit made through this store (or when the
// store is closed). A relay waits on it instead of polling; take a fresh channel after each wake-up.
// Commits made on transactions the store did not begin (EnqueueTx on a foreign *sql.Tx) do not
// signal it.
func (s *Store) Changed() <-chan struct{} {
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
	return mapErr(ctx, readAgain(ctx, fn))
}

// readAgain runs fn again while it fails with SQLITE_READONLY_RECOVERY or SQLITE_READONLY_CANTINIT,
// as many as readRetries times. SQLite's reader of a -shm it cannot write fails so when it found the
// WAL index header half rewritten by a writer's commit (RECOVERY), or found no read mark it may use
// just after the writer restarted its WAL and before the writer's own next read set one (CANTINIT):
// nothing was read, and the read again succeeds, as SQLite's own retry would have it for a reader
// that may write.
func readAgain(ctx context.Context, fn func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if !readAgainAfter(err) || attempt == readRetries || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Microsecond)
	}
}

// readAgainAfter tells the failures of a reader of a read-only -shm that read nothing and pass.
func readAgainAfter(err error) bool {
	return errors.Is(err, sqlite3.READONLY_RECOVERY) || errors.Is(err, sqlite3.READONLY_CANTINIT)
}

// readRetries bounds the reads again of a read-only store that met a writer's commit.
const readRetries = 100
