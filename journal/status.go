// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
)

// Stats are a Journal's figures for metrics.
type Stats struct {
	Bytes    int64 // the segments' bytes
	Segments int
	First    int64 // the first retained byte
	End      int64 // the journal's end: the position of its next byte
	// Totals of what retention deleted from this directory, kept across starts.
	DeletedSegments, DeletedBytes, DeletedUnderCap int64
}

// Stats returns the journal's size and what retention deleted from it.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := Stats{Segments: len(j.sealed) + 1, Bytes: j.size, End: j.tailBase + j.size, First: j.tailBase,
		DeletedSegments: j.st.segments, DeletedBytes: j.st.bytes, DeletedUnderCap: j.st.capped}
	for _, seg := range j.sealed {
		s.Bytes += seg.size
	}
	if len(j.sealed) > 0 {
		s.First = j.sealed[0].base
	}
	return s
}

// RetainedInfo says where a journal's retained bytes begin and what retention deleted before them.
type RetainedInfo struct {
	// First is the journal-wide position of the first retained byte: the first segment's position.
	First int64
	// End is the position of the journal's next byte.
	End int64
	// Runs are the runs whose lines retention deleted, each with the last seq of it deleted, for
	// the runs of the most recently deleted segments (at most 1000); RunsDropped says how many
	// runs deleted earlier are no longer listed.
	Runs        []DeletedRun
	RunsDropped int64
	// Totals of what retention deleted, and of that, the segments deleted under the cap while a
	// reader had not read them.
	DeletedSegments, DeletedBytes, DeletedUnderCap int64
}

// Retained reports where the journal in dir begins and what retention deleted, without the
// directory's lock: what a reader whose position is below First reports as lost. A directory whose
// first or last segments were deleted by another program is ErrModified, as at Open: those lines
// are not retention's to report.
func Retained(dir string) (RetainedInfo, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return RetainedInfo{}, err
	}
	st, found, err := readState(dir)
	if err != nil {
		return RetainedInfo{}, err
	}
	if len(segs) > 0 {
		bases := make([]int64, len(segs))
		for i, s := range segs {
			bases[i] = s.base
		}
		// Lines deleted by hand are not retention's to report.
		if err := checkEnds(dir, bases, st, found); err != nil {
			return RetainedInfo{}, err
		}
	}
	info := RetainedInfo{First: st.deleted, End: st.deleted, Runs: st.runs, RunsDropped: st.dropped,
		DeletedSegments: st.segments, DeletedBytes: st.bytes, DeletedUnderCap: st.capped}
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		info.First, info.End = segs[0].base, last.base+last.size
	}
	return info, nil
}

// ReaderLag is a registered reader and how far behind the journal's end it is.
type ReaderLag struct {
	ReaderInfo
	LagBytes    int64
	LagSegments int  // the segments holding bytes it has not read
	Ahead       bool // its position is past the journal's end
	Lost        bool // its position is below the first retained byte: retention deleted lines it had not read
}

// DirStatus is what Status reports of a journal directory.
type DirStatus struct {
	Segments    int
	First, End  int64 // the first retained byte, and the position of the next
	Last        int64 // the last segment's position: the one appended to
	Bytes       int64
	Readers     []ReaderLag
	Retained    RetainedInfo
	WouldDelete []DeletedSegment // what a trim with the options given would delete now
	Held        *Held            // and the first segment it would keep, and why
	OverCap     bool             // over WithMaxBytes even after that trim
}

// Status reports the journal in dir, its readers and their lag, and what a trim with opts
// (WithKeep, WithMaxBytes) would delete and what it would keep and why, without the directory's
// lock and changing nothing. It cannot see which segments readers hold open. A path that is not a
// directory, or a directory holding a file no journal keeps, is ErrNotJournal, as at Open: a
// mistyped path is not reported as a journal with no segments yet.
func Status(ctx context.Context, dir string, opts ...Option) (DirStatus, error) {
	if err := ctx.Err(); err != nil {
		return DirStatus{}, err
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			return DirStatus{}, errors.New("journal: Status: a nil Option")
		}
		opt(&o)
	}
	ret, err := newRetention(&o)
	if err != nil {
		return DirStatus{}, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return DirStatus{}, err
	}
	if err := checkJournalNames(dir); err != nil {
		return DirStatus{}, err
	}
	readers, err := Readers(dir)
	if err != nil {
		return DirStatus{}, err
	}
	st, _, err := readState(dir)
	if err != nil {
		return DirStatus{}, err
	}
	info, err := Retained(dir)
	if err != nil {
		return DirStatus{}, err
	}
	ds := DirStatus{Segments: len(segs), First: info.First, End: info.End, Bytes: info.End - info.First, Retained: info}
	if len(segs) > 0 {
		ds.Last = segs[len(segs)-1].base
	}
	for _, r := range readers {
		lag := ReaderLag{ReaderInfo: r, Ahead: r.Position > ds.End, Lost: r.Position < ds.First}
		if !lag.Ahead {
			lag.LagBytes = ds.End - r.Position
			for _, s := range segs {
				if s.base+s.size > r.Position {
					lag.LagSegments++
				}
			}
		}
		ds.Readers = append(ds.Readers, lag)
	}
	if len(segs) > 1 {
		segSize := o.segmentSize
		if segSize <= 0 {
			segSize = DefaultSegmentSize
		}
		steps, held, _, err := ret.plan(dir, segs[:len(segs)-1], ds.End, segs[len(segs)-1].size, segSize, readers, nil, st)
		if err != nil {
			return DirStatus{}, err
		}
		after := ds.Bytes
		for _, s := range steps {
			ds.WouldDelete = append(ds.WouldDelete, DeletedSegment{Position: s.seg.base, Size: s.seg.size, Reason: s.reason, Behind: s.behind})
			after -= s.seg.size
		}
		ds.Held, ds.OverCap = held, ret.maxBytes > 0 && after > ret.maxBytes
	} else {
		ds.OverCap = ret.maxBytes > 0 && ds.Bytes > ret.maxBytes
	}
	return ds, nil
}
