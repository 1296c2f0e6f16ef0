// SPDX-License-Identifier: Apache-2.0

package journal

import "errors"

// Sentinel errors, for what callers branch on with errors.Is. Verify and Check return the stream
// errors as *Error values; File.Append refuses a batch that would leave a gap with ErrStreamGap too,
// a line that is not a journal line with ErrMalformed, and one the file holds with other bytes with
// ErrPayloadConflict; LineKey returns ErrMalformed.
var (
	// ErrStreamGap is returned when a run's line is not the one after its last (a run must start at
	// seq 1). The reader cannot continue past a gap.
	ErrStreamGap = errors.New("journal: stream gap")
	// ErrPayloadConflict is returned when a (run, seq) seen before arrives with other bytes. The
	// reader quarantines the run.
	ErrPayloadConflict = errors.New("journal: payload conflict")
	// ErrMalformed is returned when a complete line is not a UTF-8 JSON object with a non-empty
	// string "engine_run_id" and an integer "seq" of at least 1, each given once and under no other
	// name that encoding/json would take for it.
	ErrMalformed = errors.New("journal: malformed line")
	// ErrLocked is returned when OpenFile finds another File, in this process or another, with the
	// journal open.
	ErrLocked = errors.New("journal: file is locked by another writer")
	// ErrNotJournal is returned when OpenFile is given a file that is not a journal: its first or
	// last complete line is not a JSON object with "engine_run_id" and "seq", its torn tail does not
	// begin with '{', or what OpenFile reads of it holds a NUL byte. OpenFile leaves such a file as it
	// was, unlocked.
	ErrNotJournal = errors.New("journal: not a journal file")
	// ErrModified is returned when Append finds that the file no longer ends where this File's last
	// append left it (another program appended to it or truncated it), or that its path now names
	// another file or none (it was renamed or removed). Nothing is written. It comes wrapped with
	// outbox.ErrSinkRefused, so a relay stops instead of writing after lines it does not know.
	ErrModified = errors.New("journal: file modified by another program")
	// ErrFailed is returned when Append is called after an earlier Append failed in a way that leaves
	// the file's state unknown (its fdatasync or its truncate-back failed). The file takes no more
	// appends; reopen it, which re-checks the tail.
	ErrFailed = errors.New("journal: file failed; reopen it")
	// ErrNotEmpty is returned when Adopt is given a directory that already holds files: a journal's
	// segments, or anything else. Nothing is changed.
	ErrNotEmpty = errors.New("journal: the directory is not empty")
	// ErrReaderName is returned when a reader name is not 1-64 bytes of [A-Za-z0-9._-] not starting
	// with '.'.
	ErrReaderName = errors.New("journal: invalid reader name")
	// ErrReaderBehind is returned when RemoveReader without force names a reader whose position is
	// below the journal's end, so that the reader has lines it has not applied.
	ErrReaderBehind = errors.New("journal: the reader has not applied the whole journal")
	// ErrOnceKey is returned, wrapped, when a Builder is given a once key a line cannot carry as
	// given (not valid UTF-8), or an Event is given WithOnceKey with a key other than its call's.
	ErrOnceKey = errors.New("journal: invalid once key member")
	// ErrEventType is returned, wrapped, when a Builder (or Event) is given a type a line cannot
	// carry as given: an empty one, which no inbox.Router can register a handler for, or one that is
	// not valid UTF-8, which encoding/json would rewrite (every invalid byte becomes U+FFFD, so
	// distinct types would render alike).
	ErrEventType = errors.New("journal: invalid event type")
	// ErrTraceContext is returned, wrapped, when a trace context is not W3C Trace Context: a builder
	// given one fails, LineTraceContext reports it.
	ErrTraceContext = errors.New("journal: malformed trace context")
)
