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
	// ErrQuarantine is returned, wrapped, by a handler to park its run instead of stopping the call:
	// the line's writes are undone, the run is quarantined ("handler", Detail holds the error's
	// text), and the call goes on with the other runs.
	ErrQuarantine = errors.New("inbox: quarantine the run")
	// ErrLocked is returned when Open finds another Inbox, in this process or another, with the
	// database open (or RunLocked running on it). For a book that an outbox engine holds open, the
	// error is ErrOutboxDatabase as well, and says so.
	ErrLocked = errors.New("inbox: database is locked by another inbox")
	// ErrNotQuarantined is returned when Release or AcceptGap names a run that is not quarantined.
	ErrNotQuarantined = errors.New("inbox: run is not quarantined")
	// ErrNotGap is returned when AcceptGap names a run quarantined for another reason than a gap: a
	// conflict or a handler's refusal is never accepted by moving past it.
	ErrNotGap = errors.New("inbox: run is not quarantined for a gap")
	// ErrSourceMoved is returned when ApplyFrom finds that the source's stored position is not the
	// one the call started from: nothing is applied or stored, and the source must read its position
	// again (SourcePosition) and read again from there.
	ErrSourceMoved = errors.New("inbox: the source's stored position moved")
	// ErrInHandler is returned when a handler calls the inbox whose Apply is running it (detected by
	// the context the handler was given): the call would wait for the writer the handler holds.
	ErrInHandler = errors.New("inbox: called from inside a handler of the same inbox")
	// ErrTxEnded is returned when a handler, or a WriteTx function, committed or rolled back the
	// inbox's transaction (or a failed statement made SQLite roll it back): nothing of the call is
	// stored.
	ErrTxEnded = errors.New("inbox: the transaction ended inside the handler")
	// ErrSavepointMisused is returned when, after a handler, the savepoint the inbox keeps around
	// the handler's line is gone (the handler released it) or is not the innermost of its name
	// (the handler opened another of the same name): the inbox could no longer undo that line's
	// writes alone, so nothing of the call is stored.
	ErrSavepointMisused = errors.New("inbox: a handler released or shadowed the line's savepoint")
	// ErrOutboxDatabase is returned when Open is given a database that holds an outbox's tables: a
	// book is never a consumer's database.
	ErrOutboxDatabase = errors.New("inbox: the database holds an outbox's tables")
	// ErrHardLinked is returned when Open finds that the database file has more than one name:
	// SQLite gives each name its own -wal file, so an open through the other name after a crash
	// would fork it.
	ErrHardLinked = errors.New("inbox: database file has more than one hard link")
	// ErrClosed is returned when a method is called after Close.
	ErrClosed = errors.New("inbox: closed")
	// ErrCallInsideTx is returned when a method that writes (Apply, ApplyFrom, ApplyFile, FollowFile,
	// WriteTx, Release, AcceptGap, ForgetFile) is called from inside a write transaction of the same
	// inbox: from a WriteTx function or a handler, whatever context it is given. That transaction
	// holds the inbox's one writer, so the call would wait for itself until its context ended. Write
	// through the transaction the function or the handler was given instead; ReadTx and the other
	// reads use the read pool and work there (a handler's own context excepted: ErrInHandler).
	//
	// The inbox knows the goroutine that holds the writer, so a call made on that goroutine is caught
	// (see litedb.Holder), at the cost of an atomic load while no write transaction is open. A call
	// that the function hands to another goroutine and then waits for cannot be told from any other
	// caller's: it waits for the writer until its own context ends.
	ErrCallInsideTx = errors.New("inbox: call from inside a write transaction of the same inbox")
	// ErrReadOnly is returned when a write (Apply, ApplyFrom, ApplyFile, FollowFile, WriteTx,
	// Release, AcceptGap) is called on an Inbox opened with OpenReadOnly: it writes nothing.
	ErrReadOnly = errors.New("inbox: opened read-only")
	// ErrNotInbox is returned when OpenReadOnly is given a database that holds no inbox's tables: it
	// was never opened by an Inbox, and a read-only open does not create them.
	ErrNotInbox = errors.New("inbox: the database holds no inbox")
	// ErrDatabaseOpened is returned, wrapped, when a read of an Inbox opened with OpenReadOnly began
	// while no Inbox had the database open and met one that opened it meanwhile: nothing read is
	// returned, and the same read again succeeds. It is outbox.ErrBookOpened.
	ErrDatabaseOpened = litedb.ErrBookOpened
	// ErrNoTotals is returned when Totals reads a database an earlier release keeps (opened
	// read-only beside it), whose inbox schema has no counts yet: the next Open of the consumer
	// migrates it.
	ErrNoTotals = errors.New("inbox: the database keeps no counts yet")
	// ErrHandlerPanicked is returned to a HandlerContextFunc's end function when the handler
	// panicked; the panic itself goes on to the caller as before.
	ErrHandlerPanicked = errors.New("inbox: the handler panicked")
	// ErrNotDatabase is returned when RunLocked is given a path that names something other than a
	// SQLite database: a directory, a pipe or device, or a file of other bytes (a journal).
	ErrNotDatabase = errors.New("inbox: not a SQLite database")
	// ErrRetentionGap is returned, wrapped, when a source no longer holds what follows the position
	// the inbox stored for it: retention removed it before it was applied. A journal source's error
	// is a *JournalGapError; a stream source's (package jetstream) is its own, and
	// jetstream.ErrRetentionGap is this same value, so errors.Is matches either with either. Nothing
	// is skipped: the source stops, and goes on only after an operator's explicit decision
	// (AcceptRetentionGap for a journal).
	ErrRetentionGap = errors.New("inbox: the source no longer holds the lines after the stored position")
	// ErrJournalReplaced is returned when ApplyJournal or FollowJournal finds that the journal
	// directory no longer holds what the stored position was taken in: the segment it names is gone
	// while earlier ones remain, or it does not begin with the line the position's segment began
	// with, does not hold at the position the line applied last, or holds other bytes before it. The
	// journal was removed and another started in its place, or a segment was rewritten: reading on
	// would misread another journal's lines as the next ones. ForgetJournal gives the position up;
	// the next call then reads the directory as a new reader does.
	ErrJournalReplaced = errors.New("inbox: the journal directory is not the one its position was taken in")
	// ErrFileLost is returned when ApplyFile or FollowFile finds that the path names another file
	// than the one its stored position was taken in (a rotation, or a file replaced) and that file
	// cannot be found in the path's directory, by its device and inode or as a copy of what was read
	// of it: the lines after the position may be in it, and giving them up silently is not the
	// inbox's call. The error names the file and how far it was read. Putting the file back in the
	// directory (under any name) lets the source read its last lines and go on; ForgetFile gives them
	// up.
	ErrFileLost = errors.New("inbox: the file being read cannot be found")
	// ErrUnknownType is returned by a Router's handler for a line whose event type no handler was
	// registered for, under UnknownStop (the default); under UnknownQuarantine the handler's error
	// wraps it as well as ErrQuarantine.
	ErrUnknownType = errors.New("inbox: no handler for the event type")
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
