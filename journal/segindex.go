// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/textmachine/outbox/outbox"
)

// segIndexMagic begins every segment index file; a format change takes a new one.
const segIndexMagic = "outbox journal segment index 2\n"

// checkpointMagic begins a checkpoint of the segment appended to: the same layout, where the
// modification time's place holds the segment file's inode number (a growing segment's time moves
// with every append). Its own header keeps it from ever being read as a sealed segment's index.
const checkpointMagic = "outbox journal tail checkpoint 1\n"

// segIndex is what a sealed segment's index file holds: where the segment lies in the journal and
// what proves the file beside it is that segment (its size, its modification time, and the digest of
// its last line, read alone from lastStart), then each run's spans as runIndex keeps them, with offsets from the
// segment's first byte. A run's first and last seq in the segment are its first span's seq and its
// last span's last; the spans say which part of the segment holds a seq.
type segIndex struct {
	base, size int64
	// The segment's modification time (ns): another journal's segment of the same position, size and
	// last line, whose index would describe other lines, was written at another moment. A copy that
	// keeps the time (cp -a, tar, rsync -t) keeps its indexes; one that does not has them rebuilt.
	mtime int64
	// In a checkpoint: the segment file's inode number (see fileID). A copy of the directory, with
	// or without its times, makes new files, whose checkpoints are then not trusted.
	ino        uint64
	checkpoint bool  // a checkpoint of the growing segment's first size bytes, not a seal
	lastStart  int64 // where the segment's last line starts, from its first byte
	lastSum    [sha256.Size]byte
	runs       []segRun // by id
}

type segRun struct {
	id    string
	spans []span // by seq, disjoint; off from the segment's first byte
}

// errBadIndex: an index file that is torn, fails its checksum or is not one. It never leaves the
// package: such an index is rebuilt from its segment.
var errBadIndex = errors.New("not a valid segment index")

// encode renders x with its checksum.
func (x *segIndex) encode() []byte {
	b := []byte(segIndexMagic)
	if x.checkpoint {
		b = []byte(checkpointMagic)
	}
	b = binary.AppendUvarint(b, uint64(x.base))
	b = binary.AppendUvarint(b, uint64(x.size))
	if x.checkpoint {
		b = binary.AppendUvarint(b, x.ino)
	} else {
		b = binary.AppendVarint(b, x.mtime)
	}
	b = binary.AppendUvarint(b, uint64(x.lastStart))
	b = append(b, x.lastSum[:]...)
	b = binary.AppendUvarint(b, uint64(len(x.runs)))
	for _, r := range x.runs {
		b = binary.AppendUvarint(b, uint64(len(r.id)))
		b = append(b, r.id...)
		b = binary.AppendUvarint(b, uint64(len(r.spans)))
		for _, sp := range r.spans {
			b = binary.AppendUvarint(b, uint64(sp.seq))
			b = binary.AppendUvarint(b, uint64(sp.off))
			b = binary.AppendUvarint(b, uint64(sp.n))
			b = binary.AppendUvarint(b, uint64(sp.size))
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// parseSegIndex reads an index file, checking its checksum and that what it says is possible for a
// segment: every span within the segment, spans in order and disjoint, run ids in order and unique.
// Whether it is the index of the segment beside it is checked against that segment (matches).
// A checkpoint is not an index: parseSegIndex refuses one.
func parseSegIndex(b []byte) (*segIndex, error) { return parseIndexFile(b, false) }

// parseCheckpoint reads a checkpoint file of the segment appended to, with parseSegIndex's checks;
// a sealed segment's index is not a checkpoint.
func parseCheckpoint(b []byte) (*segIndex, error) { return parseIndexFile(b, true) }

func parseIndexFile(b []byte, checkpoint bool) (*segIndex, error) {
	magic := segIndexMagic
	if checkpoint {
		magic = checkpointMagic
	}
	if len(b) < len(magic)+sha256.Size || !bytes.HasPrefix(b, []byte(magic)) {
		return nil, fmt.Errorf("%w: too short or no header", errBadIndex)
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], sum) {
		return nil, fmt.Errorf("%w: its checksum does not match", errBadIndex)
	}
	d := decoder{b: body[len(magic):]}
	x := &segIndex{base: d.int(), size: d.int(), checkpoint: checkpoint}
	if checkpoint {
		x.ino = d.uint()
	} else {
		x.mtime = d.varint()
	}
	x.lastStart = d.int()
	copy(x.lastSum[:], d.bytes(sha256.Size))
	nruns := d.count()
	if d.err == nil {
		switch {
		case x.size <= 0 || x.base > math.MaxInt64-x.size:
			d.fail("segment size %d at %d", x.size, x.base)
		case x.lastStart >= x.size || x.size-x.lastStart > outbox.DefaultMaxLineSize+1:
			d.fail("last line at %d of %d", x.lastStart, x.size)
		}
	}
	for i := 0; i < nruns && d.err == nil; i++ {
		r := segRun{id: string(d.bytes(d.count()))}
		if i > 0 && d.err == nil && r.id <= x.runs[i-1].id {
			d.fail("run ids out of order")
		}
		nspans := d.count()
		if nspans == 0 {
			d.fail("run %q without spans", r.id)
		}
		for k := 0; k < nspans && d.err == nil; k++ {
			sp := span{seq: d.int(), off: d.int()}
			n, size := d.int(), d.int()
			switch {
			case d.err != nil:
			case sp.seq < 1 || n < 1 || n > math.MaxUint32 || sp.seq > math.MaxInt64-n:
				d.fail("span of %d seqs from %d", n, sp.seq)
			case size < 2*n || size > math.MaxUint32 || sp.off >= x.size || size > x.size-sp.off:
				d.fail("span of %d bytes at %d", size, sp.off)
			case k > 0 && sp.seq <= r.spans[k-1].last():
				d.fail("spans out of order")
			}
			sp.n, sp.size = uint32(n), uint32(size)
			r.spans = append(r.spans, sp)
		}
		x.runs = append(x.runs, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the runs", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return x, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errBadIndex, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("a number is cut short or too large")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("a number is cut short or too large")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	v := d.uint()
	if v > math.MaxInt64 {
		d.fail("a number is too large")
		return 0
	}
	return int64(v)
}

// count reads a number of things each at least a byte long, so never more than the bytes left.
func (d *decoder) count() int {
	v := d.uint()
	if v > uint64(len(d.b)) {
		d.fail("a count of %d with %d bytes left", v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("cut short")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// segIndexOf renders the part of a run index that covers one segment (every span of x lies in it),
// with offsets from base.
func segIndexOf(x *runIndex, base, size, mtime, lastStart int64, lastSum [sha256.Size]byte) *segIndex {
	si := &segIndex{base: base, size: size, mtime: mtime, lastStart: lastStart - base, lastSum: lastSum}
	for id, rs := range x.runs {
		if rs.unsorted {
			rs.sort()
		}
		r := segRun{id: id, spans: make([]span, len(rs.spans))}
		for i, sp := range rs.spans {
			sp.off -= base
			r.spans[i] = sp
		}
		si.runs = append(si.runs, r)
	}
	slices.SortFunc(si.runs, func(a, b segRun) int { return cmp.Compare(a.id, b.id) })
	return si
}

// mergeInto adds the segment's spans to a journal-wide run index.
func (si *segIndex) mergeInto(x *runIndex) {
	for _, r := range si.runs {
		x.addSpans(r.id, r.spans, si.base)
	}
}

// addSpans adds spans of run id, each off+delta in x's offsets. Spans that overlap or come out of
// order are put right by the sort before the next lookup.
func (x *runIndex) addSpans(id string, spans []span, delta int64) {
	rs := x.runs[id]
	if rs == nil {
		rs = &runSpans{}
		x.runs[id] = rs
	}
	for _, sp := range spans {
		sp.off += delta
		if len(rs.spans) > 0 && sp.seq <= rs.top {
			rs.unsorted = true
		}
		rs.spans = append(rs.spans, sp)
		rs.top = max(rs.top, sp.last())
	}
}
