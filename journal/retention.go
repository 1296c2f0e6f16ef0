// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// The fault points of a retention delete, in the order it passes them.
const (
	faultTrimLocked   = "journal.trim_locked"   // the segments to delete are locked, nothing recorded
	faultTrimRecorded = "journal.trim_recorded" // the record says they are deleted; none is unlinked
	faultTrimSegment  = "journal.trim_segment"  // a segment is unlinked, its index not yet
	faultTrimIndex    = "journal.trim_index"    // a segment and its index are unlinked, the directory not synced
)

// trimGroup bounds how many segments one step of a trim locks, records and unlinks together: one
// record write for many segments, and a bounded number of descriptors held.
const trimGroup = 64

// Why a segment is deleted.
const (
	ReasonRead     = "every reader has read it" // and it is older than the keep duration
	ReasonCap      = "the journal is over its cap"
	ReasonRecorded = "retention recorded its deletion before a crash or an error stopped it"
)

// Why a segment stays.
const (
	HeldUnread  = "a reader has not read it"
	HeldKeep    = "it is younger than the keep duration"
	HeldOpen    = "a reader holds it open"
	HeldAhead   = "a reader's position is past the journal's end, so it says nothing about what the reader has read"
	HeldBadFile = "a reader's file cannot be read, so what that reader has read is unknown"
)

// WithKeep keeps a sealed segment at least d after it was sealed (its modification time), even once
// every reader has read it (0 by default). Giving WithKeep or WithMaxBytes turns retention on: the
// Journal trims after each seal. d must not be negative.
func WithKeep(d time.Duration) Option {
	return func(o *options) { o.keep, o.retain = d, true }
}

// WithMaxBytes caps the journal's size, the sum of its segments' sizes: past n, the oldest sealed
// segments are deleted even when a reader has not read them (logged at Error with the readers left
// behind, and counted: Stats, TrimReport). The last segment is never deleted, nor a segment a reader
// holds open, so the journal exceeds n while those alone exceed it. Giving WithKeep or WithMaxBytes
// turns retention on. n must be positive.
func WithMaxBytes(n int64) Option {
	return func(o *options) { o.maxBytes, o.maxSet, o.retain = n, true, true }
}

// WithLogger sets where the Journal says what retention deleted and why, and what failed in a trim
// run after a seal (which does not fail the Append that sealed). The Journal is silent by default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// withClock replaces the time retention measures segments' ages against, for tests.
func withClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// DeletedSegment is a segment a trim deleted, or would delete.
type DeletedSegment struct {
	Position, Size int64
	Reason         string   // one of the Reason constants
	Behind         []string // readers that had not read it (a deletion under the cap)
}

// Held is the first sealed segment a trim keeps, and why: every later segment stays with it.
type Held struct {
	Position, Size int64
	Reason         string    // one of the Held constants
	Readers        []string  // the readers that hold it (HeldUnread, HeldAhead)
	Until          time.Time // HeldKeep: when it may go
}

// TrimReport says what a trim deleted and what the journal is after it.
type TrimReport struct {
	Deleted      []DeletedSegment // oldest first
	DeletedBytes int64
	UnderCap     int      // of Deleted, how many went under the cap (a reader had not read them, or the keep duration held them)
	LeftBehind   []string // the readers whose unread lines the cap deleted
	Held         *Held    // nil when every sealed segment went
	First        int64    // the first retained byte: the first segment's position
	Bytes        int64    // the segments' bytes after the trim
	Segments     int
	OverCap      bool // the journal is still over WithMaxBytes (its last segment, or held segments, exceed it)
}

// retention is what a Journal needs to trim.
type retention struct {
	keep     time.Duration
	maxBytes int64 // 0: no cap
	retain   bool  // trim after each seal
	log      *slog.Logger
	now      func() time.Time
}

func newRetention(o *options) (retention, error) {
	if o.keep < 0 {
		return retention{}, fmt.Errorf("journal: keep %v: it must not be negative", o.keep)
	}
	if o.maxSet && o.maxBytes <= 0 {
		return retention{}, fmt.Errorf("journal: max bytes %d: it must be positive", o.maxBytes)
	}
	r := retention{keep: o.keep, maxBytes: o.maxBytes, retain: o.retain, log: o.logger, now: o.now}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r, nil
}

type planStep struct {
	seg    segment
	reason string
	behind []string
}

// plan decides, oldest first, which sealed segments go and stops at the first that must stay.
// readers are read before end was taken, so no reader's position is legitimately past end.
//
// The cap counts the last segment as full (the segment size, or the largest segment in the
// directory when that is smaller, as for a journal written with smaller segments than the options
// say): a trim runs at each seal, and the last segment grows until the next, so that the journal
// stays under the cap between seals too.
func (r *retention) plan(dir string, sealed []segment, end, tailSize, segSize int64, readers []ReaderInfo, bad []string, st *retState) ([]planStep, *Held, int64, error) {
	largest := tailSize
	for _, s := range sealed {
		largest = max(largest, s.size)
	}
	total := end - firstBase(sealed, end-tailSize) - tailSize + max(tailSize, min(segSize, largest))
	var steps []planStep
	now := r.now()
	for _, seg := range sealed {
		segEnd := seg.base + seg.size
		if segEnd <= st.deleted {
			steps = append(steps, planStep{seg: seg, reason: ReasonRecorded})
			total -= seg.size
			continue
		}
		var behind, ahead []string
		for _, rd := range readers {
			switch {
			case rd.Position > end:
				ahead = append(ahead, rd.Name)
			case rd.Position < segEnd:
				behind = append(behind, rd.Name)
			}
		}
		held := &Held{Position: seg.base, Size: seg.size}
		switch {
		case len(bad) > 0:
			held.Reason, held.Readers = HeldBadFile, bad
		case len(ahead) > 0:
			held.Reason, held.Readers = HeldAhead, ahead
		case len(behind) > 0:
			held.Reason, held.Readers = HeldUnread, behind
		case r.keep > 0:
			st, err := os.Stat(filepath.Join(dir, segmentName(seg.base)))
			if err != nil {
				return nil, nil, 0, fmt.Errorf("journal: %w", err)
			}
			if until := st.ModTime().Add(r.keep); now.Before(until) {
				held.Reason, held.Until = HeldKeep, until
			}
		}
		switch {
		case held.Reason == "":
			steps = append(steps, planStep{seg: seg, reason: ReasonRead})
		case r.maxBytes > 0 && total > r.maxBytes:
			steps = append(steps, planStep{seg: seg, reason: ReasonCap, behind: append(append(behind, ahead...), bad...)})
		default:
			return steps, held, total, nil
		}
		total -= seg.size
	}
	return steps, nil, total, nil
}

// firstBase is the position of the first segment: the first sealed one, or the last.
func firstBase(sealed []segment, tailBase int64) int64 {
	if len(sealed) > 0 {
		return sealed[0].base
	}
	return tailBase
}
