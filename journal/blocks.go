// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"hash/maphash"
	"io"
)

// blockSize is how much input a parse job covers; a longer line makes its block longer. At 1 MiB a
// block's per-line records (about 5,000 of 40 bytes) are still in the parsing core's cache when they
// are checked: BenchmarkVerify measured 0.19× of the plain read against 0.18× with 4 MiB blocks.
const blockSize = 1 << 20

type block struct {
	buf     []byte // reused from block to block
	data    []byte // complete lines, each ending in a newline: a prefix of buf
	off     int64  // offset of data in src, or -1
	lines   []parsed
	escaped [][]byte // decoded run ids of lines whose run id holds an escape
	digests []uint64 // by line: its hash under the Verifier's seed
	tooLong int64    // after the lines: a line of at least this many bytes, over the limit
	done    chan struct{}
}

// readBlocks cuts r into blocks of whole lines and hands each to emit; the bytes after the last
// newline are the torn tail. Blocks come from free when one is there. A line longer than maxLine ends
// the reading: the block before it is emitted with tooLong set, and no more of the line is read.
func readBlocks(r io.Reader, off int64, maxLine int, free chan *block, emit func(*block) bool, torn *bool) error {
	// The most a block holds: a line of the limit, its newline, and a block's worth after it. It keeps
	// the offsets in a block within 32 bits (MaxLineSizeLimit).
	most := maxLine + 1 + blockSize
	var carry []byte
	for {
		var b *block
		select {
		case b = <-free:
		default:
			b = &block{}
		}
		// Room for the carried part-line and half a block at least; a buffer grown for a long line is
		// not kept for the blocks after it. (Asking for exactly the carry plus a block made a new
		// buffer whenever the carry outgrew the one a block was made with: 20% of Verify's time.)
		if need := max(blockSize, len(carry)+blockSize/2); cap(b.buf) < need || cap(b.buf) > 4*need {
			b.buf = make([]byte, need)
		}
		buf := b.buf[:min(cap(b.buf), most)]
		copy(buf, carry)
		m, err := io.ReadFull(r, buf[len(carry):])
		n := len(carry) + m
		b.tooLong = 0
		if err == nil && n < most && bytes.IndexByte(buf[len(carry):n], '\n') < 0 {
			// One line fills the block: read on in pieces, to its end or past the limit.
			var long []byte
			long, n, err = readLong(r, buf[:n], maxLine, most)
			if long != nil {
				buf, b.buf = long, long
			}
		}
		buf = buf[:min(n, len(buf))]
		end := bytes.LastIndexByte(buf, '\n') + 1
		if n-end > maxLine {
			b.tooLong = int64(n - end)
		} else {
			// The tail is kept apart before the block is handed on: the block may come back through
			// free and be overwritten while the tail is still needed.
			carry = append(carry[:0], buf[end:]...)
		}
		if end > 0 || b.tooLong > 0 {
			b.data, b.off, b.done = buf[:end], off, make(chan struct{})
			if !emit(b) || b.tooLong > 0 {
				return nil
			}
			if off >= 0 {
				off += int64(end)
			}
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			*torn = len(carry) > 0
			return nil
		case err != nil:
			return err
		}
	}
}

// readLong reads on after head, a part of one line that fills a block, in pieces as long as all that
// came before, until a newline, the end of r, or more than maxLine bytes without a newline. Nothing is
// copied while it reads, so a line refused as too long costs about the limit in memory, not a
// doubling buffer's three or four times. A line that ends within the limit is joined into one buffer,
// returned with its length; for one that does not, it returns nil and the count of bytes read.
func readLong(r io.Reader, head []byte, maxLine, most int) ([]byte, int, error) {
	pieces := [][]byte{head}
	total := len(head)
	var err error
	for total <= maxLine {
		p := make([]byte, min(total, most-total))
		var m int
		m, err = io.ReadFull(r, p)
		pieces, total = append(pieces, p[:m]), total+m
		if err != nil || bytes.IndexByte(p[:m], '\n') >= 0 {
			break
		}
	}
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, total, err
	}
	if total > maxLine && bytes.IndexByte(pieces[len(pieces)-1], '\n') < 0 {
		return nil, total, err // too long: no need to join it
	}
	joined := make([]byte, 0, total)
	for _, p := range pieces {
		joined = append(joined, p...)
	}
	return joined, total, err
}

func parseBlock(s *scanner, b *block, seed *maphash.Seed, maxLine int) {
	b.lines, b.escaped, b.digests = b.lines[:0], b.escaped[:0], b.digests[:0]
	data := b.data
	for start := 0; start < len(data); {
		n, run, seq, w := s.parseNext(data[start:])
		if n > maxLine {
			run, w = nil, whyTooLong
		}
		i := start + n
		line := data[start:i]
		p := parsed{start: int32(start), end: int32(i), seq: seq, why: w, runLen: int32(len(run))}
		switch {
		case s.runEsc:
			p.runEsc, p.runAt = true, int32(len(b.escaped))
			b.escaped = append(b.escaped, run)
		case s.runAt >= 0:
			p.runAt = int32(start + s.runAt)
		}
		b.lines = append(b.lines, p)
		if seed != nil {
			var d uint64
			if w == whyNone {
				d = maphash.Bytes(*seed, line)
			}
			b.digests = append(b.digests, d)
		}
		start = i + 1
	}
	if seed == nil {
		b.digests = nil
	}
}
