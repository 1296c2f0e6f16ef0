// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/textmachine/outbox/internal/litedb"
)

// Sentinel errors, for what callers branch on with errors.Is. A line that is not a journal line wraps
// journal.ErrMalformed (and is a *LineError); every other error is wrapped with what was being done.
var (
	// ErrQuarantine is what a handler returns, wrapped, to park its run instead of stopping the call:
	// the line's writes are undone, the run is quarantined ("handler", Detail holds the error's
	// text), and the call goes on with the other runs.
	ErrQuarantine = errors.New("inbox: quarantine the run")
	// ErrLocked is returned by Open when another Inbox, in this process or another, has the database
	// open (or Migrate runs on it). For a book that an outbox engine holds open, the error is
	// ErrOutboxDatabase as well, and says so.
	ErrLocked = errors.New("inbox: database is locked by another inbox")
	// ErrNotQuarantined is returned by Release and AcceptGap for a run that is not quarantined.
	ErrNotQuarantined = errors.New("inbox: run is not quarantined")
	// ErrNotGap is returned by AcceptGap for a run quarantined for another reason than a gap: a
	// conflict or a handler's refusal is never accepted by moving past it.
	ErrNotGap = errors.New("inbox: run is not quarantined for a gap")
	// ErrSourceMoved is returned by ApplyFrom when the source's stored position is not the one the
	// call started from: nothing is applied or stored, and the source must read its position again
	// (SourcePosition) and read again from there.
	ErrSourceMoved = errors.New("inbox: the source's stored position moved; read it again")
	// ErrInHandler is returned when a handler calls the inbox whose Apply is running it (detected by
	// the context the handler was given): the call would wait for the writer the handler holds.
	ErrInHandler = errors.New("inbox: called from inside a handler of the same inbox")
	// ErrTxEnded is returned when a handler, or a WriteTx function, committed or rolled back the
	// inbox's transaction (or a failed statement made SQLite roll it back): nothing of the call is
	// stored.
	ErrTxEnded = errors.New("inbox: the transaction ended inside the handler; nothing of the call is stored")
	// ErrSavepointMisused is returned when, after a handler, the savepoint the inbox keeps around
	// the handler's line is gone (the handler released it) or is not the innermost of its name
	// (the handler opened another of the same name): the inbox could no longer undo that line's
	// writes alone, so nothing of the call is stored.
	ErrSavepointMisused = errors.New("inbox: a handler released or shadowed the savepoint the inbox keeps around its line; nothing of the call is stored")
	// ErrOutboxDatabase is returned by Open for a database that holds an outbox's tables: a book is
	// never a consumer's database.
	ErrOutboxDatabase = errors.New("inbox: the database holds an outbox's tables")
	// ErrHardLinked is returned by Open when the database file has more than one name: SQLite gives
	// each name its own -wal file, so an open through the other name after a crash would fork it.
	ErrHardLinked = errors.New("inbox: database file has more than one hard link")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("inbox: closed")
)

// LineError is the error of a line given to Apply or ApplyFrom that is not a journal line. It wraps
// journal.ErrMalformed; Index says which line of the call it is (from 0), so that a source can name
// where it read it.
type LineError struct {
	Index int
	Err   error // wraps journal.ErrMalformed
}

func (e *LineError) Error() string {
	return fmt.Sprintf("inbox: line %d of the batch: %v", e.Index+1, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// MaxSourceNameLen bounds a source's name, in bytes.
const MaxSourceNameLen = 4096

// checkName refuses a source name or run id argument that no stored one can equal (see
// litedb.IDProblem).
func checkName(what, s string, maxLen int) error {
	if s == "" {
		return fmt.Errorf("inbox: empty %s", what)
	}
	if why := litedb.IDProblem(s, maxLen); why != "" {
		return fmt.Errorf("inbox: %s %q: %s", what, s, why)
	}
	return nil
}

// wrapf wraps err with what was being done, naming the package once: an error of the package's own
// already begins with its name, which then moves to the front.
func wrapf(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if msg, ok := strings.CutPrefix(err.Error(), prefix); ok {
		return &wrapped{prefix + what + ": " + msg, err}
	}
	return &wrapped{prefix + what + ": " + err.Error(), err}
}

const prefix = "inbox: "

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// withCtx joins ctx's error to err when ctx has ended and err does not already say so: the driver
// reports a statement its context interrupted as SQLITE_INTERRUPT, which does not tell a caller
// that branches on context.Canceled or context.DeadlineExceeded why the call failed.
var withCtx = litedb.WithEnd
