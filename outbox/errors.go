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
	// ErrInvalidOnceKey is returned when a once key is empty (which is how the schema spells "not in
	// the ledger"), longer than MaxOnceKeyLen bytes, not valid UTF-8, or holds a control character.
	ErrInvalidOnceKey = errors.New("outbox: invalid once key")
	// ErrInvalidLine is returned when a builder renders a line that is empty, holds a newline (the
	// journal is newline-delimited), or is longer than the store's line limit (WithMaxLineSize).
	ErrInvalidLine = errors.New("outbox: invalid line")
	// ErrSeqExhausted is returned when a run has been given seq 2^63-1 and can take no more events.
	ErrSeqExhausted = errors.New("outbox: the run has used every sequence number")
	// ErrLocked is returned when Open finds another Store, in this process or another, holding the
	// database's writer lock.
	ErrLocked = errors.New("outbox: database is locked by another writer")
	// ErrHardLinked is returned when Open finds that the database file has more than one name.
	// SQLite gives each name its own -wal file, so a crash followed by an open through the other
	// name would fork the book.
	ErrHardLinked = errors.New("outbox: database file has more than one hard link")
	// ErrReadOnly is returned when a write method is called on a store opened with OpenReadOnly.
	ErrReadOnly = errors.New("outbox: store is read-only")
	// ErrClosed is returned when a method is called after Close.
	ErrClosed = errors.New("outbox: store is closed")
	// ErrUnknownEvent is returned when MarkAnnounced names a (run, seq) that has no row.
	ErrUnknownEvent = errors.New("outbox: no such event")
	// ErrAnnounceConflict is returned when MarkAnnounced would give a key to a second event (one that
	// holds it in the ledger or pending), or a second key to one event. The ledger holds each key once
	// and each event under one key.
	ErrAnnounceConflict = errors.New("outbox: once key conflict")
	// ErrSchemaMismatch is returned when Open, OpenReadOnly or Migrate meet a book whose outbox
	// schema version is newer than this library knows, or that lacks a table, column or index the
	// protocol relies on (a unique index dropped by hand would let one key go to two events), and
	// when OpenReadOnly opens a database without the outbox tables (which it does not create).
	ErrSchemaMismatch = migrations.ErrSchemaMismatch
	// ErrNotDurable is returned when an fdatasync of the WAL failed: the call's commit was made (its
	// seq is returned with the error) but may or may not survive power loss. After a failed
	// fdatasync the kernel may have dropped the pages it could not write, so the store refuses every
	// later write. Close it and open the database again.
	ErrNotDurable = errors.New("outbox: committed, but the WAL could not be synced")
	// ErrStoreBroken is returned when the driver or SQLite panicked during the call (out of memory, a
	// VFS that panics), and by every call after it: the connection it happened on is in an unknown
	// state. Close the store and open the database again.
	ErrStoreBroken = errors.New("outbox: the store failed inside SQLite; reopen it")
	// ErrSyncFailed is returned when a write begins after an fdatasync of the WAL failed: nothing of
	// the call is stored. Close the store and open the database again.
	ErrSyncFailed = errors.New("outbox: an earlier WAL sync failed; reopen the store")
	// ErrCallInsideTx is returned when a store method that writes (Enqueue, EnqueueOnce, WriteTx,
	// MarkAnnounced, …) is called from inside a transaction of the same store: from a WriteTx
	// function, or from an EventBuilder or line check, which run inside the enqueue's transaction
	// (with group commit, on the store's committer goroutine). That transaction holds the store's one
	// writer connection, so the call would wait for itself until its deadline. Use EnqueueTx or
	// EnqueueOnceTx with WriteTx's transaction instead; reads (ReadTx, PendingEvents, …) use the read
	// pool and work there.
	//
	// The store knows the goroutine that runs the caller's code holding the writer, so a call made on
	// that goroutine is caught, at the cost of an atomic load while no such code runs. A call that
	// the function hands to another goroutine and then waits for cannot be told from any other
	// caller's: it waits for the writer and fails when its own deadline or the operation timeout ends
	// it (WithOpTimeout), with an error wrapping context.DeadlineExceeded.
	ErrCallInsideTx = errors.New("outbox: call from inside a transaction of the same store")
	// ErrBuilderStuck is returned when an EventBuilder run by the group committer did not return in
	// time: by the deadline of its own call, or of another call grouped with it, or within Close's
	// wait. Its call failed and nothing of it is stored; the builder is left to return on its own,
	// and its line is thrown away. Close returns it too, naming every such builder that has still not
	// returned.
	ErrBuilderStuck = errors.New("outbox: a builder did not return in time")
	// ErrProjected is returned when RetireEvent names a line the sink already has: what a reader was
	// given cannot be taken back.
	ErrProjected = errors.New("outbox: the line is already projected")
	// ErrSinkRefused is returned when a sink refuses a batch in a way no retry can cure: the
	// destination already holds another line under the same key, or lacks the line before the
	// batch's first. A sink wraps it in its error; the relay then stops projecting and returns the
	// error instead of backing off and trying again.
	ErrSinkRefused = errors.New("outbox: the sink refuses the batch")
	// ErrRelayRunning is returned when Run is called on a relay whose Run has not returned yet: one
	// relay projects its run from one loop. The call returns at once and changes nothing; once the
	// first Run returns, Run may be called again.
	ErrRelayRunning = errors.New("outbox: the relay is already running")
	// ErrRowsMissing is returned when a run's stored lines are not contiguous after its projected
	// position, so that projecting them would put a gap in the journal. It happens only when rows
	// were deleted outside the protocol (ForgetEvents without Recover, or by hand).
	ErrRowsMissing = errors.New("outbox: stored lines are not contiguous")
	// ErrBookBehind is returned when a relay's first call (Run, Flush, Recover) finds that its sink
	// holds lines the book does not know of: a run the book never recorded, or a run further than the
	// highest seq the book recorded for it. The book was restored from a backup older than the sink
	// (or belongs to another sink): a relay going on would have the engine redo the work the book
	// lost under a new run, and the sink would hold it twice. Nothing is appended. The error names
	// the runs (the first few, and how many in all) and what the book lacks of each. Restore the
	// sink's copy that matches the book, or accept the sink's positions explicitly (outbox
	// reconcile); WithBookCheck(false) turns the check off for a sink that other books write to as
	// well.
	ErrBookBehind = errors.New("outbox: the book is behind its sink")
	// ErrInboxDatabase is returned when Open is given a consumer's database, one that holds an
	// inbox's tables: the book's tables are not added to it, nothing is written. Give the engine a
	// database of its own (inbox.Open refuses a book the same way, inbox.ErrOutboxDatabase).
	ErrInboxDatabase = errors.New("outbox: the database holds an inbox's tables")
	// ErrMarkUnknown is returned by a SinceLister for a mark it cannot prove its own (another sink,
	// a restored copy of it, the mark's line gone by retention); the start then compares every run.
	ErrMarkUnknown = errors.New("outbox: the sink does not know the book's mark")
	// ErrBookOpened is returned when a read of a read-only Store began while no writer had the book
	// open and met one that opened it meanwhile. Nothing read is returned; the same read again goes
	// through the writer's WAL and succeeds. A read-only inbox's reads return the same error.
	ErrBookOpened = litedb.ErrBookOpened
)

// Limits on ids, in bytes.
const (
	MaxRunIDLen   = 256
	MaxOnceKeyLen = 1024
)

// checkRunID applies the run id rules; see ErrInvalidRunID.
func checkRunID(runID string) error {
	if runID == "" {
		return fmt.Errorf("%w: empty", ErrInvalidRunID)
	}
	if why := litedb.IDProblem(runID, MaxRunIDLen); why != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidRunID, runID, why)
	}
	return nil
}

// checkOnceKey applies the once key rules; see ErrInvalidOnceKey.
func checkOnceKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidOnceKey)
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
