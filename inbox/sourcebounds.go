// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"log/slog"
	"time"
)

// SourceBounds is how a source outside this package (a stream's, in the jetstream module) reads for
// this inbox, as the file source does: from the options the inbox was opened with.
type SourceBounds struct {
	Lines   int           // lines in one batch, one transaction (WithBatchLines)
	Bytes   int           // bytes of lines in one batch, at least MaxLine (WithBatchBytes)
	MaxLine int           // the longest line, without its newline (WithMaxLineSize)
	Poll    time.Duration // how often a follower looks when nothing woke it (WithPollInterval)
	Logger  *slog.Logger  // WithLogger's, or one that discards
}

// SourceBounds returns the bounds a source reads this inbox's lines in.
func (in *Inbox) SourceBounds() SourceBounds {
	return SourceBounds{Lines: in.batchLines(), Bytes: in.batchBytes(), MaxLine: in.maxLineSize(),
		Poll: in.pollInterval(), Logger: in.logger()}
}
