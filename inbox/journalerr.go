// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"fmt"
	"strings"
)

// MaxRunsNamed bounds how many runs a JournalGapError names.
const MaxRunsNamed = 20

// JournalGapError is a journal source's retention gap: the directory's first segment begins after
// the position the inbox holds (or, for a reader with no position, after byte 0). It wraps
// ErrRetentionGap.
type JournalGapError struct {
	Dir string
	// Position is the journal-wide position the inbox holds, the first byte it has not applied; -1
	// when it holds none (a new reader of a journal trimmed before it came).
	Position int64
	First    int64 // where the first retained segment begins: bytes Position (or 0) to First−1 are gone
	// RunsLost names runs whose lines the inbox will not get, as far as the inbox and the journal's
	// indexes can tell: runs the retained sealed segments hold from a seq after the one the inbox
	// needs next. At most MaxRunsNamed; RunsLostMore counts the others. A run whose lines were all
	// in the removed segments, and that the inbox never saw, cannot be named.
	RunsLost     []LostRun
	RunsLostMore int
}

// LostRun is the seqs of a run that went with a retention gap.
type LostRun struct {
	RunID             string
	FirstSeq, LastSeq int64
}

func (e *JournalGapError) Error() string {
	var b strings.Builder
	if e.Position < 0 {
		fmt.Fprintf(&b, "inbox: journal %s begins at byte %d: its first %d bytes were removed before this inbox read them",
			quotePath(e.Dir), e.First, e.First)
	} else {
		fmt.Fprintf(&b, "inbox: journal %s no longer holds bytes %d to %d, after the position applied: its first retained segment begins at byte %d",
			quotePath(e.Dir), e.Position, e.First-1, e.First)
	}
	if len(e.RunsLost) > 0 {
		b.WriteString("; lines it will not get:")
		for i, r := range e.RunsLost {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " run %q seqs %d to %d", r.RunID, r.FirstSeq, r.LastSeq)
		}
		if e.RunsLostMore > 0 {
			fmt.Fprintf(&b, " and %d more runs", e.RunsLostMore)
		}
	}
	b.WriteString(" (AcceptRetentionGap records the decision and reads on from the first retained segment)")
	return b.String()
}

func (e *JournalGapError) Unwrap() error { return ErrRetentionGap }
