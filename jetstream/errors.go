// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"errors"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// Sentinel errors, for what callers branch on with errors.Is. Those of the sink wrap
// outbox.ErrSinkRefused as well, so a relay stops on them.
var (
	// ErrGap is returned when a line's predecessor is not in the stream, or a batch skips a seq. It
	// wraps journal.ErrStreamGap.
	ErrGap error = &alias{"jetstream: stream gap", journal.ErrStreamGap}
	// ErrConflict is returned when the stream holds other bytes under a line's (run, seq), or
	// answers "duplicate" for a line it does not hold. It wraps journal.ErrPayloadConflict.
	ErrConflict error = &alias{"jetstream: payload conflict", journal.ErrPayloadConflict}
	// ErrLineKey is returned when a line's own engine_run_id or seq is not the key it is appended
	// under, or the line is not a journal line at all.
	ErrLineKey = errors.New("jetstream: the line's key is not its row's")
	// ErrTooLarge is returned when a run's subject, or a line with its headers, would exceed the
	// server's limits, or the server refused a line as larger than the stream's max message size
	// (lowered after NewSink).
	ErrTooLarge = errors.New("jetstream: past the server's limits")
	// ErrStreamSettings is returned when a stream's settings contradict what the sink needs; the
	// message says what to change.
	ErrStreamSettings = errors.New("jetstream: stream settings do not give the required guarantee")
	// ErrRetentionGap is returned, wrapped in a *RetentionGapError, when the stream no longer holds
	// the message after the position an inbox stored for it: messages were removed (a max age, a max
	// number of messages or bytes, a purge, the stream deleted and created again) before they were
	// applied. It is inbox.ErrRetentionGap, the same value, which a segmented journal source's gap
	// wraps too: one errors.Is covers a consumer of either source.
	ErrRetentionGap = inbox.ErrRetentionGap
	// ErrReaderNameShared is returned when ApplyStream or FollowStream finds the reader's key in the
	// stream's readers' bucket written, since the Inbox last wrote it, by someone else with another
	// position: two consumers with their own inboxes read under one reader name
	// (inbox.WithReaderName, or the same derived name), and the key, which each overwrites with its
	// own position, may run ahead of one of them, so that Trim removes what that one has not
	// applied. What the call applied is committed; give each consumer its own name.
	ErrReaderNameShared = errors.New("jetstream: another consumer registers under this reader's name")
)

// alias is a sentinel of this package that is also one of the journal's: errors.Is finds both, and the
// message names one package, not "jetstream: journal: …".
type alias struct {
	msg string
	err error
}

func (e *alias) Error() string { return e.msg }
func (e *alias) Unwrap() error { return e.err }
