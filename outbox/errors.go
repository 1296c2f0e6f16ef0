// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/internal/diskfull"
	"github.com/textmachine/outbox/internal/litedb"
	"github.com/textmachine/outbox/migrations"
)

// Sentinel errors, for what callers branch on with errors.Is. Every other error is wrapped with what
// was being done.
var (
	// ErrInvalidRunID is returned when a run id is empty, longer than MaxRunIDLen bytes, not valid
	// UTF-8, or holds a control character (U+0000 to U+001F, U+007F). A run id is the reader's stream
	// identity: two ids that print alike would merge two streams.
	ErrInvalidRunID = errors.New("outbox: invalid run id")
	// ErrEmptyRunID is returned for an empty run id. It is an ErrInvalidRunID.
	ErrEmptyRunID = fmt.Errorf("%w: empty", ErrInvalidRunID)
	// ErrInvalidOnceKey is returned when a once key is empty, longer than MaxOnceKeyLen bytes, not
	// valid UTF-8, or holds a control character.
	ErrInvalidOnceKey = errors.New("outbox: invalid once key")
	// ErrEmptyOnceKey is returned for an empty once key, which is how the schema spells "not in the
	// ledger". It is an ErrInvalidOnceKey.
	ErrEmptyOnceKey = fmt.Errorf("%w: empty", ErrInvalidOnceKey)
	// ErrInvalidLine is returned when a builder renders a line that is empty, holds a newline (the
	// journal is newline-delimited), or is longer than the store's line limit (WithMaxLineSize).
	ErrInvalidLine = errors.New("outbox: invalid line")
	// ErrInvalidLimit is returned when a pending read is asked for fewer than one line: pending reads
	// are always bounded.
	ErrInvalidLimit = errors.New("outbox: limit must be at least 1")
	// ErrSeqExhausted is returned when a run has been given seq 2^63-1 and can take no more events.
	ErrSeqExhausted = errors.New("outbox: the run has used every sequence number")
	// ErrLocked is returned by Open when another Store, in this process or another, holds the
	// database's writer lock.
	ErrLocked = errors.New("outbox: database is locked by another writer")
	// ErrHardLinked is returned by Open when the database file has more than one name. SQLite gives
	// each name its own -wal file, so a crash followed by an open through the other name would fork
	// the book.
	ErrHardLinked = errors.New("outbox: database file has more than one hard link")
	// ErrReadOnly is returned by the write methods of a store opened with OpenReadOnly.
	ErrReadOnly = errors.New("outbox: store is read-only")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("outbox: store is closed")
	// ErrUnknownEvent is returned when MarkAnnounced names a (run, seq) that has no row.
	ErrUnknownEvent = errors.New("outbox: no such event")
	// ErrAnnounceConflict is returned when MarkAnnounced would give a key to a second event (one that
	// holds it in the ledger or pending), or a second key to one event. The ledger holds each key once
	// and each event under one key.
	ErrAnnounceConflict = errors.New("outbox: once key conflict")
	// ErrNoSchema is returned by OpenReadOnly for a database without the outbox tables.
	ErrNoSchema = errors.New("outbox: database has no outbox schema")
	// ErrSchemaMismatch is returned by Open, OpenReadOnly and Migrate for a book whose outbox schema
	// version is newer than this library knows, or that lacks a table, column or index the protocol
	// relies on (a unique index dropped by hand would let one key go to two events).
	ErrSchemaMismatch = migrations.ErrSchemaMismatch
	// ErrNotDurable is returned when an fdatasync of the WAL failed: the call's commit was made (its
	// seq is returned with the error) but may or may not survive power loss. After a failed
	// fdatasync the kernel may have dropped the pages it could not write, so the store refuses every
	// later write. Close it and open the database again.
	ErrNotDurable = errors.New("outbox: committed, but the WAL could not be synced")
	// ErrStoreBroken is returned by the call during which the driver or SQLite panicked (out of
	// memory, a VFS that panics), and by every call after it: the connection it happened on is in an
	// unknown state. Close the store and open the database again.
	ErrStoreBroken = errors.New("outbox: the store failed inside SQLite; reopen it")
	// ErrSyncFailed is returned by every write begun after an fdatasync of the WAL failed: nothing of
	// the call is stored. Close the store and open the database again.
	ErrSyncFailed = errors.New("outbox: an earlier WAL sync failed; reopen the store")
)

// Limits on ids, in bytes.
const (
	MaxRunIDLen   = 256
	MaxOnceKeyLen = 1024
)

// checkRunID applies the run id rules; see ErrInvalidRunID.
func checkRunID(runID string) error {
	if runID == "" {
		return ErrEmptyRunID
	}
	if why := litedb.IDProblem(runID, MaxRunIDLen); why != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidRunID, runID, why)
	}
	return nil
}

// checkOnceKey applies the once key rules; see ErrInvalidOnceKey.
func checkOnceKey(key string) error {
	if key == "" {
		return ErrEmptyOnceKey
	}
	if why := litedb.IDProblem(key, MaxOnceKeyLen); why != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidOnceKey, key, why)
	}
	return nil
}

// named joins syscall.ENOSPC to an error of SQLite's that a full file system under the book caused (see
// diskfull.Named): the driver names only some of them. Every write of the store returns through it.
func (s *Store) named(err error) error { return diskfull.Named(s.path, err) }

// mapErr turns driver errors that callers branch on into the package's sentinels, keeping the driver
// error in the chain. A closed *sql.DB reports its state only in an error string, hence the match. When
// ctx has ended, why it ended joins the chain (see withEnd): the driver reports an interrupted
// statement as SQLITE_INTERRUPT, which says nothing about whether the caller cancelled or ran out of
// time.
func mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sqlite3.CONSTRAINT_UNIQUE):
		return fmt.Errorf("%w: %w", ErrAnnounceConflict, err)
	case litedb.Closed(err):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return withEnd(ctx, err)
}
