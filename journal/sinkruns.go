// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/textmachine/outbox/outbox"
)

// SinkRuns lists the runs the journal holds, each with its highest seq, sorted by run id: the
// outbox.RunLister a relay compares with its book at its first call. It reads what the first Append
// reads: the sealed segments' index files (and, to prove each belongs to its segment, that segment's
// last line), and the last segment; no sealed segment's lines, unless its index is missing or does not
// match it and is rebuilt. Later calls read nothing.
func (j *Journal) SinkRuns(ctx context.Context) ([]outbox.SinkRun, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return nil, err
	}
	if err := j.checkUnmodified(); err != nil {
		return nil, err
	}
	if err := j.loadIndexes(ctx); err != nil {
		return nil, err
	}
	return j.runs.sinkRuns(), nil
}

// SinkRuns lists the runs the file holds, each with its highest seq, sorted by run id (see
// Journal.SinkRuns). The first call after OpenFile reads the whole file once, as the first Append
// does; later calls read nothing.
func (j *File) SinkRuns(ctx context.Context) ([]outbox.SinkRun, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return nil, err
	}
	if err := j.checkUnmodified(); err != nil {
		return nil, err
	}
	if err := j.index(ctx); err != nil {
		return nil, err
	}
	return j.runs.sinkRuns(), nil
}

func (x *runIndex) sinkRuns() []outbox.SinkRun {
	out := make([]outbox.SinkRun, 0, len(x.runs))
	for id, rs := range x.runs {
		out = append(out, outbox.SinkRun{RunID: id, LastSeq: rs.top})
	}
	slices.SortFunc(out, func(a, b outbox.SinkRun) int { return cmp.Compare(a.RunID, b.RunID) })
	return out
}

// SinkRunsSince lists the runs with lines after mark, a mark this journal gave (every run for a nil
// mark), each with its highest seq, sorted by run id, and the mark of the journal's end: the
// outbox.SinceLister a relay's book check uses once the book holds a mark. A mark is the journal-wide
// position of an end and the length and digest of the line that ends there; the journal proves a mark
// its own by reading that line alone and comparing its digest. A mark it cannot prove (another
// journal's, a restored older copy's, a line retention deleted, a mark not of this form) is
// outbox.ErrMarkUnknown. Besides that line and the journal's last line, it reads what SinkRuns reads.
func (j *Journal) SinkRunsSince(ctx context.Context, mark []byte) ([]outbox.SinkRun, []byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return nil, nil, err
	}
	if err := j.checkUnmodified(); err != nil {
		return nil, nil, err
	}
	if err := j.loadIndexes(ctx); err != nil {
		return nil, nil, err
	}
	return j.runsSince(mark, firstBase(j.sealed, j.tailBase), j.tailBase+j.size)
}

// SinkRunsSince lists the runs with lines after mark, a mark this file gave (see
// Journal.SinkRunsSince); its positions are the file's.
func (j *File) SinkRunsSince(ctx context.Context, mark []byte) ([]outbox.SinkRun, []byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return nil, nil, err
	}
	if err := j.checkUnmodified(); err != nil {
		return nil, nil, err
	}
	if err := j.index(ctx); err != nil {
		return nil, nil, err
	}
	return j.runsSince(mark, 0, j.size)
}

// markMagic starts every mark the journal gives, so that a mark of another form is told apart.
const markMagic = "outbox-journal-mark-1\x00"

// lineMark is a place in the journal: the end of a line (or its first byte, with no line), the
// line's length and its digest.
type lineMark struct {
	end, length int64
	sum         [sha256.Size]byte
}

func (m lineMark) encode() []byte {
	b := append([]byte(markMagic), make([]byte, 0, 2*binary.MaxVarintLen64+sha256.Size)...)
	b = binary.AppendUvarint(b, uint64(m.end))
	b = binary.AppendUvarint(b, uint64(m.length))
	return append(b, m.sum[:]...)
}

func decodeMark(b []byte) (m lineMark, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte(markMagic))
	if !ok {
		return m, false
	}
	end, n := binary.Uvarint(rest)
	if n <= 0 || end > 1<<62 {
		return m, false
	}
	rest = rest[n:]
	length, n := binary.Uvarint(rest)
	if n <= 0 || length > end || length > outbox.DefaultMaxLineSize+1 {
		return m, false
	}
	rest = rest[n:]
	if len(rest) != sha256.Size {
		return m, false
	}
	m.end, m.length = int64(end), int64(length)
	copy(m.sum[:], rest)
	return m, true
}

// runsSince lists the runs with a span that ends after mark's end (every run, for a nil mark) and
// marks end. The journal holds first..end. A run's highest seq has a copy in one of its spans, so a
// run whose highest seq lies after the mark has such a span; a run listed for a span of older seqs
// costs the book one lookup more, nothing else.
func (j *runLog) runsSince(mark []byte, first, end int64) ([]outbox.SinkRun, []byte, error) {
	from := int64(-1)
	if mark != nil {
		m, ok := decodeMark(mark)
		if !ok {
			return nil, nil, fmt.Errorf("journal: %s: a mark not of this journal's form: %w", j.name, outbox.ErrMarkUnknown)
		}
		if err := j.proveMark(m, first, end); err != nil {
			return nil, nil, err
		}
		from = m.end
	}
	out := make([]outbox.SinkRun, 0)
	for id, rs := range j.runs.runs {
		if from >= 0 && !rs.endsAfter(from) {
			continue
		}
		out = append(out, outbox.SinkRun{RunID: id, LastSeq: rs.top})
	}
	slices.SortFunc(out, func(a, b outbox.SinkRun) int { return cmp.Compare(a.RunID, b.RunID) })
	m, err := j.markAt(first, end)
	if err != nil {
		return nil, nil, err
	}
	var next []byte
	if m != nil {
		next = m.encode()
	}
	return out, next, nil
}

func (rs *runSpans) endsAfter(pos int64) bool {
	for i := len(rs.spans) - 1; i >= 0; i-- {
		if sp := rs.spans[i]; sp.off+int64(sp.size) > pos {
			return true
		}
	}
	return false
}

// proveMark reads the line the mark names and compares its digest: the mark is this journal's, at
// a place it still holds, or ErrMarkUnknown.
func (j *runLog) proveMark(m lineMark, first, end int64) error {
	if m.end > end || m.end-m.length < first {
		return fmt.Errorf("journal: %s holds bytes %d..%d, not the mark's line ending at %d: %w",
			j.name, first, end, m.end, outbox.ErrMarkUnknown)
	}
	if m.length == 0 {
		// The mark of an empty journal: it names no line, and everything after it is all there is.
		if m.end != first || m.sum != ([sha256.Size]byte{}) {
			return fmt.Errorf("journal: %s: a mark at %d naming no line: %w", j.name, m.end, outbox.ErrMarkUnknown)
		}
		return nil
	}
	b := make([]byte, m.length)
	if err := j.src.readAt(b, m.end-m.length); err != nil {
		return err
	}
	if b[len(b)-1] != '\n' || sha256.Sum256(b) != m.sum {
		return fmt.Errorf("journal: %s: the line ending at %d is not the mark's: %w", j.name, m.end, outbox.ErrMarkUnknown)
	}
	return nil
}

// markAt returns the mark of the journal's end, end: the last line's length and digest, found by
// reading back from end for its start. nil when no line starts within the line size limit before it.
func (j *runLog) markAt(first, end int64) (*lineMark, error) {
	if end <= first {
		return &lineMark{end: end}, nil
	}
	const step = 64 << 10
	low := max(first, end-outbox.DefaultMaxLineSize-1)
	start := int64(-1)
	var buf []byte
	for to := end - 1; to > low && start < 0; {
		at := max(low, to-step)
		buf = slices.Grow(buf[:0], int(to-at))[:to-at]
		if err := j.src.readAt(buf, at); err != nil {
			return nil, err
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			start = at + int64(i) + 1
		}
		to = at
	}
	if start < 0 {
		if low != first {
			return nil, nil
		}
		start = first
	}
	b := make([]byte, end-start)
	if err := j.src.readAt(b, start); err != nil {
		return nil, err
	}
	return &lineMark{end: end, length: end - start, sum: sha256.Sum256(b)}, nil
}

var (
	_ outbox.RunLister   = (*Journal)(nil)
	_ outbox.RunLister   = (*File)(nil)
	_ outbox.SinceLister = (*Journal)(nil)
	_ outbox.SinceLister = (*File)(nil)
)
