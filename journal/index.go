// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/textmachine/outbox/outbox"
)

// readChunk is how much of the file one read takes; a longer line makes the read longer, up to the
// limit.
const readChunk = 1 << 20

// spanReach bounds how far a span's lines lie from its first: a line that starts this far or further
// from the first line of its run's open span starts a new one. Finding a line of a span then reads
// less than spanReach bytes before it.
const spanReach = 1 << 20

// errClosing: Close was called while a read was under way; the read gives up at its next chunk.
var errClosing = errors.New("file closed")

// runLog is what File and Journal share: the run index over a journal's bytes, and the checks of a
// batch against it. Offsets are the journal's: a File's are its file's, a Journal's run across its
// segments, which src reads as one.
type runLog struct {
	name string // the file or directory, for messages
	src  byteSource
	scan scanner // parses lines with the verifier's rules
	runs runIndex
	rbuf []byte // the line reader's buffer, kept between reads
	read int64  // bytes read to index the journal and check re-deliveries

	closing atomic.Bool // set by Close, so that a long read under the lock gives up
}

// byteSource reads a journal's bytes at its offsets; its errors name what it read.
type byteSource interface {
	readAt(b []byte, off int64) error
}

// lineReader reads the file's lines forward, from the start of a line to end, in chunks of
// readChunk bytes. A line longer than the limit is skipped without holding more of it than the
// limit: it is no line the File wrote, and judging it is the verifier's work. Before each read it
// checks its context and whether the File is closing, so a long read is cancellable at every
// chunk.
type lineReader struct {
	j    *runLog
	ctx  context.Context
	buf  []byte
	data []byte // what is read and not yet returned: a part of buf, from pos on
	pos  int64  // the file offset of data[0]
	end  int64
}

func (j *runLog) lines(ctx context.Context, from, end int64) *lineReader {
	return &lineReader{j: j, ctx: ctx, buf: j.rbuf, pos: from, end: end}
}

// done gives the reader's buffer back to the File, unless it grew for a long line.
func (r *lineReader) done() {
	if cap(r.buf) <= readChunk {
		r.j.rbuf = r.buf
	}
}

// next returns the next line with its newline, and its offset; io.EOF once the reader is at end.
// The line is good until the next call.
func (r *lineReader) next() (line []byte, off int64, err error) {
	for {
		if i := bytes.IndexByte(r.data, '\n'); i >= 0 {
			line, off = r.data[:i+1], r.pos
			r.data, r.pos = r.data[i+1:], r.pos+int64(i)+1
			if i > outbox.DefaultMaxLineSize {
				continue // it fitted in a buffer grown for an earlier line
			}
			return line, off, nil
		}
		if r.pos+int64(len(r.data)) >= r.end {
			// The File's content ends in a newline; bytes after the last one are not a line.
			return nil, 0, io.EOF
		}
		if len(r.data) > outbox.DefaultMaxLineSize {
			if err := r.skipLine(); err != nil {
				return nil, 0, err
			}
			continue
		}
		if err := r.fill(); err != nil {
			return nil, 0, err
		}
	}
}

// fill reads the next chunk after data, moving data to the front of buf, and growing buf when data
// (a part-line) leaves less than half a chunk free: a long line doubles the buffer, so reading it
// costs time in proportion to its length.
func (r *lineReader) fill() error {
	if err := r.j.interrupted(r.ctx); err != nil {
		return err
	}
	if need := len(r.data) + readChunk/2; cap(r.buf) < need {
		// Never more than the longest line and half a chunk: data is at most a line of the limit.
		size := min(max(readChunk, 2*cap(r.buf)), outbox.DefaultMaxLineSize+1+readChunk/2)
		r.buf = make([]byte, max(size, need))
	}
	n := copy(r.buf[:cap(r.buf)], r.data)
	at := r.pos + int64(n)
	m := int(min(int64(cap(r.buf)-n), r.end-at))
	if err := r.j.src.readAt(r.buf[n:n+m], at); err != nil {
		return err
	}
	r.j.read += int64(m)
	r.data = r.buf[:n+m]
	return nil
}

// skipLine reads past the newline of a line longer than the limit, keeping none of it.
func (r *lineReader) skipLine() error {
	r.pos += int64(len(r.data))
	r.data = r.data[:0]
	if cap(r.buf) > readChunk {
		r.buf = make([]byte, readChunk)
	}
	for r.pos < r.end {
		if err := r.j.interrupted(r.ctx); err != nil {
			return err
		}
		b := r.buf[:min(int64(cap(r.buf)), r.end-r.pos)]
		if err := r.j.src.readAt(b, r.pos); err != nil {
			return err
		}
		r.j.read += int64(len(b))
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			r.data, r.pos = b[i+1:], r.pos+int64(i)+1
			return nil
		}
		r.pos += int64(len(b))
	}
	return nil
}

func (j *runLog) interrupted(ctx context.Context) error {
	if j.closing.Load() {
		return fmt.Errorf("journal: %s: %w", j.name, errClosing)
	}
	return ctx.Err()
}

// runIndex knows where each run's lines are in the file: for each run, spans of its seqs, sorted by
// seq and disjoint, each saying that every seq from seq to seq+n-1 has a copy between off and end.
// A span grows while its run's lines follow on, seq after seq, within spanReach bytes of its first
// line, whatever other runs' lines lie between. It is built by reading the file once, the first time
// an Append or LastSeq needs it, and kept up by the appends after.
type runIndex struct {
	runs    map[string]*runSpans
	scanned int64 // the index covers the file up to here, the start of a line
	built   bool
}

type span struct {
	seq, off int64
	n, size  uint32 // size: from off to the end of the span's last line, under spanReach + a line
}

func (s span) last() int64 { return s.seq + int64(s.n) - 1 }

type runSpans struct {
	spans    []span
	top      int64 // the highest seq
	unsorted bool  // a span was added out of seq order: sort before a lookup
	gone     int64 // retention deleted the run's lines up to this seq
	sorted   int   // len(spans) when last sorted
}

func (x *runIndex) init(size int64) {
	x.runs = map[string]*runSpans{}
	x.built = size == 0
}

// add notes that run's line of seq, length bytes with its newline, starts at off.
func (x *runIndex) add(run []byte, seq, off int64, length int) {
	rs := x.runs[string(run)]
	if rs == nil {
		rs = &runSpans{}
		x.runs[string(run)] = rs
	}
	if n := len(rs.spans); n > 0 {
		sp := &rs.spans[n-1]
		switch {
		case seq >= sp.seq && seq <= sp.last():
			return // a copy of a line the span has
		case seq == sp.last()+1 && off-sp.off < spanReach:
			if seq <= rs.top {
				rs.unsorted = true
			}
			sp.n++
			sp.size = uint32(off + int64(length) - sp.off)
			rs.top = max(rs.top, seq)
			return
		case seq <= rs.top:
			rs.unsorted = true
		}
	}
	rs.spans = append(rs.spans, span{seq: seq, off: off, n: 1, size: uint32(length)})
	rs.top = max(rs.top, seq)
	// Copies of earlier lines (a re-delivery) make spans that sorting drops: sorting whenever the
	// spans have doubled keeps them from piling up, at a cost shared out over the adds.
	if rs.unsorted && len(rs.spans) > 2*rs.sorted+64 {
		rs.sort()
	}
}

// sort orders the spans by seq and trims each to the seqs no earlier span has: a span's seqs each
// have a copy within it, so any part of them does too.
func (rs *runSpans) sort() {
	slices.SortStableFunc(rs.spans, func(a, b span) int { return cmp.Compare(a.seq, b.seq) })
	out := rs.spans[:0]
	for _, sp := range rs.spans {
		if k := len(out); k > 0 {
			prev := out[k-1]
			if sp.last() <= prev.last() {
				continue
			}
			if sp.seq <= prev.last() {
				sp.n -= uint32(prev.last() + 1 - sp.seq)
				sp.seq = prev.last() + 1
			}
		}
		out = append(out, sp)
	}
	rs.spans, rs.unsorted, rs.sorted = out, false, len(out)
}

// find returns the span that holds seq.
func (rs *runSpans) find(seq int64) (span, bool) {
	if rs.unsorted {
		rs.sort()
	}
	i, _ := slices.BinarySearchFunc(rs.spans, seq, func(s span, seq int64) int { return cmp.Compare(s.seq, seq) })
	if i < len(rs.spans) && rs.spans[i].seq == seq {
		return rs.spans[i], true
	}
	if i > 0 && seq <= rs.spans[i-1].last() {
		return rs.spans[i-1], true
	}
	return span{}, false
}

func (x *runIndex) last(run string) int64 {
	if rs := x.runs[run]; rs != nil {
		return rs.top
	}
	return 0
}

// scanInto adds to x the lines from where x's scan stopped (x.scanned) up to end, where a line ends,
// and marks x built: a read interrupted by ctx or Close is taken up where it stopped by the next call.
func (j *runLog) scanInto(ctx context.Context, x *runIndex, end int64) error {
	if x.built {
		return nil
	}
	r := j.lines(ctx, x.scanned, end)
	defer r.done()
	for {
		line, off, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if n, run, seq, w := j.scan.parseNext(line); w == whyNone && n == len(line)-1 {
			x.add(run, seq, off, len(line))
		}
		x.scanned = off + int64(len(line))
	}
	for _, rs := range x.runs {
		if rs.unsorted {
			rs.sort()
		}
	}
	x.scanned, x.built = end, true
	return nil
}

// noteAppended adds the lines of a batch just written at off.
func (x *runIndex) noteAppended(runID string, lines []outbox.EventLine, off int64) {
	run := []byte(runID)
	for _, l := range lines {
		x.add(run, l.Seq, off, len(l.Line)+1)
		off += int64(len(l.Line)) + 1
	}
}

// checkRedelivery compares the lines of a batch that the run already has in the file (seqs up to
// last, its highest) with their copies there: a re-delivery after a crash carries the same bytes, and
// a line under a key the file holds with other bytes is a payload conflict, which the reader would
// quarantine the run for; a seq the file skips is a gap. Each copy is found through the index: the
// span that holds it is read, less than spanReach bytes before it and the lines compared.
func (j *runLog) checkRedelivery(ctx context.Context, runID string, lines []outbox.EventLine, last int64) error {
	rs := j.runs.runs[runID]
	first := lines[0].Seq
	upTo := min(lines[len(lines)-1].Seq, last)
	seen := make([]bool, upTo-first+1)
	for seq := first; seq <= upTo; {
		sp, ok := rs.find(seq)
		if !ok && seq <= rs.gone {
			// Retention deleted it: there is no copy to compare with.
			seen[seq-first] = true
			seq++
			continue
		}
		if !ok {
			return fmt.Errorf("%w: run %q: %s holds the run up to seq %d but not seq %d: %w",
				ErrStreamGap, runID, j.name, last, seq, outbox.ErrSinkRefused)
		}
		to := min(upTo, sp.last())
		if err := j.compareSpan(ctx, runID, sp, lines, seq, to, seen); err != nil {
			return err
		}
		seq = to + 1
	}
	for i, ok := range seen {
		if !ok {
			// The index said the span holds it: the file changed under the File.
			return fmt.Errorf("%w: %s: run %q seq %d is no longer where it was: %w",
				ErrModified, j.name, runID, first+int64(i), outbox.ErrSinkRefused)
		}
	}
	return nil
}

// compareSpan reads the span sp and compares every copy of runID's seqs from to to that it holds
// with the batch's line.
func (j *runLog) compareSpan(ctx context.Context, runID string, sp span, lines []outbox.EventLine, from, to int64, seen []bool) error {
	first := lines[0].Seq
	r := j.lines(ctx, sp.off, sp.off+int64(sp.size))
	defer r.done()
	for {
		line, _, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n, run, seq, w := j.scan.parseNext(line)
		if w != whyNone || n != len(line)-1 || seq < from || seq > to || string(run) != runID {
			continue
		}
		if !bytes.Equal(line[:n], lines[seq-first].Line) {
			return fmt.Errorf("%w: run %q seq %d: %s holds the line with other bytes: %w",
				ErrPayloadConflict, runID, seq, j.name, outbox.ErrSinkRefused)
		}
		seen[seq-first] = true
	}
}
