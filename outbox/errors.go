package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/ncruces/go-sqlite3"
)

// Sentinel errors. Every other error is wrapped with %w and a prefix naming what was being done.
var (
	// ErrEmptyRunID: a run id is the reader's stream identity; an empty one would be a stream nobody
	// can key.
	ErrEmptyRunID = errors.New("outbox: empty run id")
	// ErrEmptyOnceKey: the empty key is how the schema spells "not in the ledger".
	ErrEmptyOnceKey = errors.New("outbox: empty once key")
	// ErrInvalidLine: a stored line must be non-empty and hold no newline, since the journal is
	// newline-delimited and a newline inside a line would split it in two.
	ErrInvalidLine = errors.New("outbox: invalid line (empty or containing a newline)")
	// ErrInvalidLimit: pending reads are always bounded.
	ErrInvalidLimit = errors.New("outbox: limit must be at least 1")
	// ErrLocked: another Store (in this process or another) holds the database's writer lock.
	ErrLocked = errors.New("outbox: database is locked by another writer")
	// ErrReadOnly: a write method was called on a store opened with OpenReadOnly.
	ErrReadOnly = errors.New("outbox: store is read-only")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("outbox: store is closed")
	// ErrUnknownEvent: MarkAnnounced named a (run, seq) that has no row.
	ErrUnknownEvent = errors.New("outbox: no such event")
	// ErrAnnounceConflict: MarkAnnounced would give a key to a second event, or a second key to one
	// event. The ledger holds each key once and each event under one key.
	ErrAnnounceConflict = errors.New("outbox: once key conflict")
	// ErrNoSchema: OpenReadOnly found a database without the outbox tables.
	ErrNoSchema = errors.New("outbox: database has no outbox schema")
	// ErrNotDurable: an fdatasync of the WAL failed. The commits it was to cover may or may not
	// survive power loss, and after a failed fdatasync the kernel may have dropped the pages it could
	// not write, so the store refuses every later write. Close it and open the database again.
	ErrNotDurable = errors.New("outbox: the WAL could not be synced")
)

// mapErr turns driver errors that callers branch on into the package's sentinels, keeping the driver
// error in the chain. A closed *sql.DB reports its state only in an error string, hence the match. When
// ctx has ended, its error joins the chain: the driver reports an interrupted statement as
// SQLITE_INTERRUPT, which says nothing about whether the caller cancelled or ran out of time.
func mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sqlite3.CONSTRAINT_UNIQUE):
		return fmt.Errorf("%w: %w", ErrAnnounceConflict, err)
	case errors.Is(err, sql.ErrConnDone), strings.Contains(err.Error(), "sql: database is closed"):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}
