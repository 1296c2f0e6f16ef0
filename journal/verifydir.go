// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// VerifyDir verifies the journal kept in dir as Verify verifies a file: its segments (the files
// named %020d.jsonl) are read in the order of their names, each line once, holding memory per run
// as Verify does; so the Report equals Verify's of the segments concatenated. Other files in dir
// (indexes, readers' positions) are not read. A finding's Error names its segment and its line in
// that segment besides its line in the journal.
//
// Each segment must begin where the one before it ends (its name is its position), and only the
// last may end in a torn line: either failing is ErrMalformed naming the segment. A directory whose
// first segment does not begin at position 0 is what retention left of a journal: runs may begin
// there at any seq (WithPartial), and Report.Start is that position.
//
// VerifyDir only reads: it takes no lock on dir and verifies it beside a running engine, holding a
// shared flock on the segment it reads (retention deletes no segment a reader holds). The segments
// are listed when it begins; the last one is read up to its end when it gets there. It stops when
// ctx is done.
func VerifyDir(ctx context.Context, dir string, opts ...VerifyOption) (Report, error) {
	bases, err := segmentBases(dir)
	if err != nil {
		return Report{}, err
	}
	if bases[0] > 0 {
		opts = append(slices.Clip(opts), WithPartial())
	}
	v := NewVerifier(opts...)
	if v.err != nil {
		return v.Report(), v.err
	}
	err = v.runSegments(ctx, dir, bases)
	rep := v.Report()
	rep.Start = bases[0]
	return rep, err
}

// SegmentFile is one segment of a journal directory: its path and the journal-wide position of its
// first byte (its name).
type SegmentFile struct {
	Path     string
	Position int64
}

// SegmentsOf lists the segments of the journal directory dir in order, for a reader that streams
// the journal (cat DIR/*.jsonl reads the same); other files in dir are not listed. A path that is
// not a directory, or a directory without a segment, is ErrNotJournal.
func SegmentsOf(dir string) ([]SegmentFile, error) {
	bases, err := segmentBases(dir)
	if err != nil {
		return nil, err
	}
	out := make([]SegmentFile, len(bases))
	for i, b := range bases {
		out[i] = SegmentFile{Path: filepath.Join(dir, segmentName(b)), Position: b}
	}
	return out, nil
}

// OpenSegmentForReading opens a segment (a regular file; a FIFO is refused without being opened)
// and holds a shared lock on it until it is closed, as a reader of a journal directory does:
// retention deletes no segment a reader holds.
func OpenSegmentForReading(path string) (*os.File, error) {
	f, err := openRegularForReading(path)
	if err != nil {
		return nil, err
	}
	if err := holdForReading(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal: lock %s for reading: %w", path, err)
	}
	return f, nil
}

// segmentBases lists the positions of dir's segments, in order; dir must hold at least one.
func segmentBases(dir string) ([]int64, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotJournal, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var bases []int64
	for _, e := range entries {
		if base, ok := parseBase(e.Name(), segmentExt); ok {
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("%w: %s holds no segment (files named like %s)", ErrNotJournal, dir, segmentName(0))
	}
	slices.Sort(bases)
	return bases, nil
}

// runSegments feeds v each segment in turn.
func (v *Verifier) runSegments(ctx context.Context, dir string, bases []int64) error {
	for i, base := range bases {
		name := segmentName(base)
		first := v.line
		size, err := v.runSegment(ctx, filepath.Join(dir, name))
		var e *Error
		if errors.As(err, &e) {
			e.Segment, e.SegmentLine = name, e.Line-first
		}
		if err != nil {
			return err
		}
		if i == len(bases)-1 {
			break
		}
		switch {
		case v.torn:
			// Only the segment appended to may end in a line being written: a sealed one ends
			// with a newline, or the next segment's first line would be read as this one's end.
			v.torn = false
			return &Error{Line: v.line + 1, Segment: name, SegmentLine: v.line - first + 1, Err: ErrMalformed,
				Reason: "a sealed segment ends without a newline (its last line is torn, or bytes were added to it)"}
		case base+size != bases[i+1]:
			return &Error{Line: v.line, Segment: name, SegmentLine: v.line - first, Err: ErrMalformed,
				Reason: fmt.Sprintf("the segment ends at position %d, but the next one, %s, begins at %d: bytes were cut from it, added to it, or lie in a segment that is gone",
					base+size, segmentName(bases[i+1]), bases[i+1])}
		}
	}
	return nil
}

// runSegment verifies one segment and returns how many bytes it read.
func (v *Verifier) runSegment(ctx context.Context, path string) (int64, error) {
	f, err := OpenSegmentForReading(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := &countingReader{r: f}
	err = v.run(ctx, r)
	return r.n, err
}

// openRegularForReading opens path for reading when it is a regular file, without waiting on a FIFO.
func openRegularForReading(path string) (*os.File, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNotJournal, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return f, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
