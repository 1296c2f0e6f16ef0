// SPDX-License-Identifier: Apache-2.0

// Package inboxseam holds what package inbox shares with the code built beside it (the stream
// source in the jetstream module, the outbox command, the metrics collector) and a program using
// the inbox has no use for: the bounds a source outside package inbox reads in, and how the names
// of the sources the inbox stores begin. Kept internal, it changes with them in one commit instead
// of binding a release to it.
package inboxseam

import (
	"log/slog"
	"time"
)

// How the name of a source's stored position (inbox.Source.Name) begins, per kind of source; what
// follows is the followed file's absolute path, the journal directory's absolute path, or the
// stream's name, a space and the subject filter. A program reads a source by the name its own
// call gave it (jetstream.StreamSourceName for a stream); the command and the metrics collector
// sort every source an inbox lists by these.
const (
	FileSourcePrefix    = "file:"
	JournalSourcePrefix = "journal:"
	StreamSourcePrefix  = "jetstream:"
)

// Bounds is how a source outside package inbox (the stream source) reads for an inbox, as the
// file source does: from the options the inbox was opened with.
type Bounds struct {
	Lines   int           // lines in one batch, one transaction (WithBatchLines)
	Bytes   int           // bytes of lines in one batch, at least MaxLine (WithBatchBytes)
	MaxLine int           // the longest line, without its newline (WithMaxLineSize)
	Poll    time.Duration // how often a follower looks when nothing woke it (WithPollInterval)
	Logger  *slog.Logger  // WithLogger's, or one that discards
}

// SourceBounds returns the bounds in, an *inbox.Inbox, reads in. Package inbox sets it when it is
// initialised (it imports this package, so this one cannot name its type); any other argument
// panics.
var SourceBounds func(in any) Bounds
