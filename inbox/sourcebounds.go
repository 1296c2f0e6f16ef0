// SPDX-License-Identifier: Apache-2.0

package inbox

import "github.com/textmachine/outbox/internal/inboxseam"

// The names of the sources this package stores begin with these; ApplyFile's and ApplyJournal's
// docs spell them out for a program.
const (
	fileSourcePrefix    = inboxseam.FileSourcePrefix
	journalSourcePrefix = inboxseam.JournalSourcePrefix
)

// The stream source, in another module, reads with this inbox's options as the file source does;
// a program has no use for them, so they cross through the seam, not the API.
func init() {
	inboxseam.SourceBounds = func(v any) inboxseam.Bounds {
		in := v.(*Inbox)
		return inboxseam.Bounds{Lines: in.batchLines(), Bytes: in.batchBytes(), MaxLine: in.maxLineSize(),
			Poll: in.pollInterval(), Logger: in.logger()}
	}
}
