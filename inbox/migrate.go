// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/textmachine/outbox/internal/diskfull"
	"github.com/textmachine/outbox/internal/litedb"
)

// ErrNotDatabase is returned by Migrate for a path that names something other than a SQLite
// database: a directory, a pipe or device, or a file of other bytes (a journal).
var ErrNotDatabase = errors.New("inbox: not a SQLite database")

// sqliteHeader opens every SQLite database file; an empty file is a database not yet written.
const sqliteHeader = "SQLite format 3\x00"

// Migrate runs fn on the consumer's database at path while holding the inbox's lock, for a tool
// that applies or rolls back the inbox's migrations (package migrations) at deploy time: db is one
// connection in WAL mode with synchronous=FULL, and fn must not keep it. Holding the lock, it
// refuses to run beside an open Inbox (ErrLocked) and an Inbox cannot open the database meanwhile.
// A missing file is created, as Open creates it.
//
// It refuses, before it takes the lock or writes anything, and creating no file: a path that is
// not a SQLite database (ErrNotDatabase), a book (ErrOutboxDatabase), and a file with more than one
// name (ErrHardLinked). The goose CLI run on the same file does none of this. An I/O error of
// SQLite's on a full file system (fn's included) is errors.Is syscall.ENOSPC.
func Migrate(ctx context.Context, path string, fn func(ctx context.Context, db *sql.DB) error) error {
	return diskfull.Named(path, migrate(ctx, path, fn))
}

func migrate(ctx context.Context, path string, fn func(ctx context.Context, db *sql.DB) error) error {
	if path == "" {
		return errors.New("inbox: empty database path")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", path, err)
	}
	if err := checkMigrateTarget(ctx, path); err != nil {
		return err
	}
	lock, file, _, err := litedb.Lock(path, lockNames)
	if err != nil {
		return err
	}
	defer litedb.Unlock(lock)
	d, err := litedb.OpenWriter(path, litedb.Config{BusyTimeout: DefaultBusyTimeout}, file, "FULL", nil)
	if err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", path, err)
	}
	defer d.Close()
	// Checked again under the lock: the outbox's tables could have come since the look before it.
	var n int
	if err := d.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name IN ('events_outbox', 'outbox_progress', ?)`, outboxVersionTable).Scan(&n); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", path, withCtx(ctx, err))
	}
	if n > 0 {
		return fmt.Errorf("%w: %s is a book, not a consumer's database", ErrOutboxDatabase, path)
	}
	if err := fn(ctx, d); err != nil {
		return err
	}
	return d.Close()
}

// checkMigrateTarget refuses what Migrate must not open read-write: a SQLite connection that sets
// WAL mode would create -wal and -shm files beside a book or write a header into a journal, so
// both are read first, without SQLite for the header and through a read-only connection (which
// creates nothing) for the schema.
func checkMigrateTarget(ctx context.Context, path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("inbox: migrate: %w", err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrNotDatabase, path)
	case st.Size() == 0:
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	head := make([]byte, len(sqliteHeader))
	_, err = io.ReadFull(f, head)
	f.Close()
	if err != nil || string(head) != sqliteHeader {
		return fmt.Errorf("%w: %s does not begin with SQLite's header", ErrNotDatabase, path)
	}
	r, err := openReadOnlyDB(ctx, path)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	defer r.Close()
	var n int
	if err := r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name IN ('events_outbox', 'outbox_progress', ?)`, outboxVersionTable).Scan(&n); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", path, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %s is a book, not a consumer's database", ErrOutboxDatabase, path)
	}
	return nil
}

// isBook reports whether the database at path holds an outbox's tables, read through a read-only
// connection that takes no lock a running engine would wait for. Any failure to read it is a no.
func isBook(ctx context.Context, path string) bool {
	r, err := openReadOnlyDB(ctx, path)
	if err != nil {
		return false
	}
	defer r.Close()
	var n int
	err = r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name IN ('events_outbox', 'outbox_progress', ?)`, outboxVersionTable).Scan(&n)
	return err == nil && n > 0
}

// openReadOnlyDB opens path for a look that writes nothing, with the default options.
func openReadOnlyDB(ctx context.Context, path string) (*sql.DB, error) {
	return litedb.OpenReadOnly(ctx, path, litedb.Config{BusyTimeout: DefaultBusyTimeout, ReadPool: DefaultReadPoolSize})
}

// heldBook is Open's error for a book that an outbox holds open: the lock is an engine's (or an
// outbox command's), not another inbox's. It is ErrLocked and ErrOutboxDatabase.
type heldBook struct{ path string }

func (e *heldBook) Error() string {
	return "inbox: " + e.path + " is a book (an outbox's database), locked by the outbox engine (or outbox command) " +
		"that has it open; give the inbox a database of its own"
}

func (e *heldBook) Unwrap() []error { return []error{ErrLocked, ErrOutboxDatabase} }
