// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// LocateRun returns the journal-wide position of the first segment of the journal in dir that can
// hold runID's line seq: the first sealed segment whose index says it holds a line of the run at or
// after seq, or, when none does, the last segment (which no index describes yet). A reader that
// must read the run's lines from seq on (a consumer's Release) reads from there, not from the
// journal's first byte. It reads the sealed segments' index files and, of each sealed segment, only
// its last line; it never writes. An index is trusted only when it is its segment's index as the
// segment is now (its checksum, position, size, modification time and last line's digest, the rules
// Open applies): a segment whose index is missing or does not match can hold anything, and is the
// answer if no earlier segment is. A segment that holds lines of the run only below seq is passed
// over; one whose lines of the run start above seq (the lines before were trimmed away) is the
// answer, so that the reader meets the gap instead of skipping it. A path that is not a directory
// is ErrNotJournal; a directory with no segment is an error wrapping os.ErrNotExist.
func LocateRun(ctx context.Context, dir, runID string, seq int64) (int64, error) {
	l, err := NewRunLocator(ctx, dir)
	if err != nil {
		return 0, err
	}
	return l.Locate(runID, seq), nil
}

// RunLocator answers LocateRun for any number of runs from one reading of a journal's seal
// indexes: what a consumer rewinding several runs at once needs. It describes the directory as it
// was when made.
type RunLocator struct {
	bases     []int64 // every segment's position, in order; the last one is the segment appended to
	untrusted int64   // the first sealed segment whose index is missing or does not match; -1: none
	runs      map[string][]locSeg
}

// locSeg: a run's lowest and highest seq in the sealed segment at base.
type locSeg struct{ base, first, last int64 }

// NewRunLocator reads the seal indexes of the journal in dir (see LocateRun).
func NewRunLocator(ctx context.Context, dir string) (*RunLocator, error) {
	bases, err := locateSegments(dir)
	if err != nil {
		return nil, err
	}
	l := &RunLocator{bases: bases, untrusted: -1, runs: map[string][]locSeg{}}
	for i, base := range bases[:len(bases)-1] {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		si, err := readTrustedIndex(dir, base, bases[i+1]-base)
		if err != nil {
			return nil, err
		}
		if si == nil {
			if l.untrusted < 0 {
				l.untrusted = base
			}
			continue
		}
		for _, r := range si.runs {
			l.runs[r.id] = append(l.runs[r.id], locSeg{base, r.spans[0].seq, r.spans[len(r.spans)-1].last()})
		}
	}
	return l, nil
}

// Locate returns the position of the first segment that can hold runID's line seq (see LocateRun).
func (l *RunLocator) Locate(runID string, seq int64) int64 {
	at := l.bases[len(l.bases)-1]
	if l.untrusted >= 0 {
		at = l.untrusted
	}
	for _, s := range l.runs[runID] {
		if s.base >= at {
			break
		}
		if s.last >= seq {
			return s.base
		}
	}
	return at
}

// First returns the position of the journal's first retained segment.
func (l *RunLocator) First() int64 { return l.bases[0] }

// Last returns the position of the segment appended to, which no index describes yet.
func (l *RunLocator) Last() int64 { return l.bases[len(l.bases)-1] }

// Runs returns the ids of the runs the trusted indexes name, sorted.
func (l *RunLocator) Runs() []string {
	return slices.Sorted(maps.Keys(l.runs))
}

// FirstSeq returns the lowest seq of runID that the sealed segments with a trusted index hold, and
// false when they hold none (its lines may still be in the last segment, or in a segment whose
// index is not trusted).
func (l *RunLocator) FirstSeq(runID string) (int64, bool) {
	segs := l.runs[runID]
	if len(segs) == 0 {
		return 0, false
	}
	return segs[0].first, true
}

// locateSegments lists the positions of dir's segments, in order, ignoring every other name (a
// reader reads beside whatever else the directory holds).
func locateSegments(dir string) ([]int64, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotJournal, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", dir, err)
	}
	var bases []int64
	for _, e := range ents {
		if base, ok := parseBase(e.Name(), segmentExt); ok && e.Type().IsRegular() {
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("journal: %s holds no segment: %w", dir, os.ErrNotExist)
	}
	slices.Sort(bases)
	return bases, nil
}

// readTrustedIndex reads the index of the sealed segment at base and returns it when it is that
// segment's index as the segment is now, nil when it is not (missing, torn, stale, another's). A
// segment whose size is not size (another program appended to it or cut it) is ErrModified.
func readTrustedIndex(dir string, base, size int64) (*segIndex, error) {
	path := filepath.Join(dir, segmentName(base))
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // retention removed it since the listing: it holds nothing now
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if st.Size() != size {
		return nil, fmt.Errorf("%w: sealed segment %s is %d bytes, and the next segment's name says %d",
			ErrModified, path, st.Size(), size)
	}
	b, err := os.ReadFile(filepath.Join(dir, indexName(base)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("journal: %w", err)
	}
	si, err := parseSegIndex(b)
	if err != nil || si.base != base || si.size != size || si.mtime != st.ModTime().UnixNano() {
		return nil, nil
	}
	last := make([]byte, size-si.lastStart)
	if err := readAt(f, last, si.lastStart); err != nil {
		return nil, fmt.Errorf("journal: read %s: %w", path, err)
	}
	if len(last) == 0 || last[len(last)-1] != '\n' || sha256.Sum256(last) != si.lastSum {
		return nil, nil
	}
	return si, nil
}
