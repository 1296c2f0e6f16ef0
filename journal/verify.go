// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/textmachine/outbox/outbox"
)

// Errors of Verify and Check, which return them as *Error values. File.Append refuses a batch that would
// leave a gap with ErrStreamGap too, a line that is not a journal line with ErrMalformed, and one the
// file holds with other bytes with ErrPayloadConflict; LineKey returns ErrMalformed.
var (
	// ErrStreamGap is returned when a run's line is not the one after its last (a run must start at
	// seq 1). The reader cannot continue past a gap.
	ErrStreamGap = errors.New("journal: stream gap")
	// ErrPayloadConflict is returned when a (run, seq) seen before arrives with other bytes. The reader
	// quarantines the run.
	ErrPayloadConflict = errors.New("journal: payload conflict")
	// ErrMalformed is returned when a complete line is not a UTF-8 JSON object with a non-empty string
	// "engine_run_id" and an integer "seq" of at least 1, each given once and under no other name
	// that encoding/json would take for it.
	ErrMalformed = errors.New("journal: malformed line")
)

// Report is what Verify found.
type Report struct {
	Lines      int  // distinct lines accepted
	Duplicates int  // byte-identical re-deliveries of an accepted (run, seq), skipped
	TornTail   bool // the input ended in a line without its newline (not an error)
	Runs       map[string]RunReport
}

// RunReport is one run's part of a Report.
type RunReport struct {
	Last       int64 // the highest seq accepted; the run's lines are 1..Last
	Lines      int
	Duplicates int
}

// Error locates a problem Verify found. It wraps ErrStreamGap, ErrPayloadConflict or ErrMalformed.
type Error struct {
	Line     int    // 1-based line number in the input
	Run      string // the line's run, when it could be read
	Seq      int64  // the line's seq, when it could be read
	Expected int64  // for a gap: the seq that should have come
	Reason   string // for a malformed line: what is wrong with it
	Length   int64  // for a line too long: its length, or as much of it as was read before Verify stopped
	Limit    int    // for a line too long: the longest line allowed (WithMaxLineSize)
	Err      error
}

func (e *Error) Error() string {
	switch e.Err {
	case ErrStreamGap:
		return fmt.Sprintf("journal: line %d: stream gap in run %q: expected seq %d, found %d", e.Line, e.Run, e.Expected, e.Seq)
	case ErrPayloadConflict:
		return fmt.Sprintf("journal: line %d: payload conflict in run %q at seq %d: same seq, other bytes", e.Line, e.Run, e.Seq)
	}
	if e.Limit > 0 {
		return fmt.Sprintf("journal: line %d: malformed line: %s (at least %d bytes; the limit is %d)", e.Line, e.Reason, e.Length, e.Limit)
	}
	return fmt.Sprintf("journal: line %d: malformed line: %s", e.Line, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Verifier checks a journal line by line. Verify reads a whole stream with one; a reader of another
// transport (a broker's stream) feeds its lines to Check. Use NewVerifier.
type Verifier struct {
	maxLine int
	err     error // an invalid option

	line  int
	lines int
	dups  int
	torn  bool
	runs  map[string]*runState
	scan  scanner

	// src, when set, holds the input: a re-delivery is compared with the first copy by reading it
	// back, byte for byte, and nothing is hashed. Without it, each accepted line is kept as a SHA-256
	// digest, so no collision short of breaking SHA-256 lets a conflict pass as a duplicate, at 32
	// bytes per line instead of the line.
	src    io.ReaderAt
	cmpBuf []byte
}

type runState struct {
	digests chunked[[sha256.Size]byte] // by seq-1, without src
	offs    chunked[int64]             // by seq-1, with src: where the line starts
	last    int64
	lines   int
	dups    int
}

// chunked is an append-only list kept in chunks: a run that grows to millions of lines never copies
// more than a chunk, and each chunk is a small allocation. The first chunk starts with room for one
// entry and doubles up to chunkLen, so that a journal of many short runs costs a few bytes per run
// rather than a chunk (16 KiB of offsets, 64 KiB of digests) each.
type chunked[T any] struct {
	chunks [][]T
}

const chunkLen = 2048

func (c *chunked[T]) add(v T) {
	n := len(c.chunks)
	switch {
	case n == 0:
		c.chunks = [][]T{make([]T, 0, 1)}
		n = 1
	case len(c.chunks[n-1]) == chunkLen:
		c.chunks = append(c.chunks, make([]T, 0, chunkLen))
		n++
	case len(c.chunks[n-1]) == cap(c.chunks[n-1]):
		grown := make([]T, len(c.chunks[n-1]), min(2*cap(c.chunks[n-1]), chunkLen))
		copy(grown, c.chunks[n-1])
		c.chunks[n-1] = grown
	}
	c.chunks[n-1] = append(c.chunks[n-1], v)
}

func (c *chunked[T]) at(i int64) *T { return &c.chunks[i/chunkLen][i%chunkLen] }

// parsed is one line of a block after parsing, as offsets into the block: it holds no pointer, so a
// block's worth of them costs the garbage collector nothing to scan.
type parsed struct {
	start, end int32 // the line, in block.data
	runAt      int32 // the run id's body in block.data, or an index in block.escaped when runEsc
	runLen     int32
	seq        int64
	why        why
	runEsc     bool
}

// VerifyOption configures Verify and NewVerifier.
type VerifyOption func(*verifyConfig) error

type verifyConfig struct {
	maxLine int
}

// MaxLineSizeLimit is the largest limit WithMaxLineSize takes: the verifier holds a line whole to
// parse it, and addresses the lines of a block of input with 32-bit offsets. It is larger than
// outbox.MaxLineSizeLimit (64 MiB), the largest line limit a store takes, on purpose: that one is
// bounded by SQLite's memory per connection, this one only by the reader's, so a journal written by
// another writer with longer lines can still be checked. Lines the store and File write are at most
// outbox.DefaultMaxLineSize, the reader's default.
const MaxLineSizeLimit = 1 << 30

// WithMaxLineSize sets the longest line, without its newline, that Verify and Check accept; the
// default is outbox.DefaultMaxLineSize, the longest line the store and File take. A longer line is
// ErrMalformed with Reason "line too long"; Verify finds it while reading, holding no more than about
// n bytes of it. n must be from 1 to MaxLineSizeLimit; another value makes Verify, and every Check of
// the Verifier, return an error.
func WithMaxLineSize(n int) VerifyOption {
	return func(c *verifyConfig) error {
		if n < 1 || n > MaxLineSizeLimit {
			return fmt.Errorf("journal: WithMaxLineSize(%d): the limit must be from 1 to %d", n, MaxLineSizeLimit)
		}
		c.maxLine = n
		return nil
	}
}

// NewVerifier returns a Verifier with nothing seen.
func NewVerifier(opts ...VerifyOption) *Verifier {
	c := verifyConfig{maxLine: outbox.DefaultMaxLineSize}
	var err error
	for _, o := range opts {
		if err == nil && o != nil {
			err = o(&c)
		}
	}
	return &Verifier{maxLine: c.maxLine, err: err, runs: map[string]*runState{}}
}

// Check checks the next complete line (without its newline). It returns an *Error for a gap, a
// conflict or a malformed line; the line is then not counted, and the Verifier's state is what it
// was before it.
func (v *Verifier) Check(line []byte) error {
	if v.err != nil {
		return v.err
	}
	if len(line) > v.maxLine {
		return v.accept(line, -1, nil, 0, whyTooLong, nil)
	}
	run, seq, w := v.scan.parseShaped(line)
	var digest [sha256.Size]byte
	if w == whyNone {
		digest = sha256.Sum256(line)
	}
	return v.accept(line, -1, run, seq, w, &digest)
}

// accept applies the reader's rules to the next line, in input order. off is the line's offset in
// v.src (-1 without one); digest is its SHA-256 when there is no src.
func (v *Verifier) accept(line []byte, off int64, run []byte, seq int64, w why, digest *[sha256.Size]byte) error {
	v.line++
	if w == whyTooLong {
		return &Error{Line: v.line, Reason: w.String(), Length: int64(len(line)), Limit: v.maxLine, Err: ErrMalformed}
	}
	if w != whyNone {
		return &Error{Line: v.line, Run: string(run), Seq: seq, Reason: w.String(), Err: ErrMalformed}
	}
	st := v.runs[string(run)] // no allocation: the compiler looks up by the bytes
	var last int64
	if st != nil {
		last = st.last
	}
	switch {
	case seq == last+1:
		if st == nil {
			st = &runState{}
			v.runs[string(run)] = st
		}
		if off >= 0 {
			st.offs.add(off)
		} else {
			st.digests.add(*digest)
		}
		st.last = seq
		st.lines++
		v.lines++
	case seq <= last:
		same, err := v.sameAsFirst(st, seq, line, digest)
		if err != nil {
			return err
		}
		if !same {
			return &Error{Line: v.line, Run: string(run), Seq: seq, Err: ErrPayloadConflict}
		}
		st.dups++
		v.dups++
	default:
		return &Error{Line: v.line, Run: string(run), Seq: seq, Expected: last + 1, Err: ErrStreamGap}
	}
	return nil
}

func (v *Verifier) sameAsFirst(st *runState, seq int64, line []byte, digest *[sha256.Size]byte) (bool, error) {
	if v.src == nil {
		return *digest == *st.digests.at(seq - 1), nil
	}
	// Only where the first copy starts is kept. It is a whole line, so it is the same as line when
	// its first len(line) bytes are and a newline follows them.
	n := len(line) + 1
	if cap(v.cmpBuf) < n {
		v.cmpBuf = make([]byte, n)
	}
	first := v.cmpBuf[:n]
	got, err := v.src.ReadAt(first, *st.offs.at(seq - 1))
	if err != nil && err != io.EOF { // at the end of src, the first copy is shorter than line
		return false, fmt.Errorf("journal: read back the line of seq %d: %w", seq, err)
	}
	return got == n && first[n-1] == '\n' && bytes.Equal(first[:n-1], line), nil
}

// Report returns what the Verifier has accepted so far.
func (v *Verifier) Report() Report {
	r := Report{Lines: v.lines, Duplicates: v.dups, TornTail: v.torn, Runs: make(map[string]RunReport, len(v.runs))}
	for id, st := range v.runs {
		r.Runs[id] = RunReport{Last: st.last, Lines: st.lines, Duplicates: st.dups}
	}
	return r
}

// Verify reads a journal and checks it: each run starts at seq 1 and goes up by one; a (run, seq)
// seen before is a duplicate when its bytes are identical and a conflict when not; runs interleave
// freely. A last line without its newline is a torn tail, reported but not an error. On an error, the
// Report covers the lines before it.
//
// Parsing is spread over the available cores, block by block; the rules are applied to the lines in
// input order by one goroutine, so the result is the same as checking line by line. A line with the
// shape of a recent one (the same members in the same order, other scalar values) is checked against
// that shape, with the same verdict as a full parse.
//
// A line longer than the limit (WithMaxLineSize, by default outbox.DefaultMaxLineSize) is
// ErrMalformed "line too long", found while reading: Verify holds no more of it than the limit and a
// block of input.
//
// Memory grows with the journal: when r is also an io.ReaderAt and an io.Seeker (an *os.File), a
// re-delivery is compared with the first copy by reading it back, and Verify keeps 8 bytes per
// accepted line (its offset); otherwise it keeps each line's SHA-256, 32 bytes. Each run costs a
// small constant besides, about 200 bytes (BenchmarkVerifyManyRuns).
func Verify(r io.Reader, opts ...VerifyOption) (Report, error) {
	v, err := verify(r, opts)
	return v.Report(), err
}

// verify is Verify, returning the Verifier.
func verify(r io.Reader, opts []VerifyOption) (*Verifier, error) {
	v := NewVerifier(opts...)
	if v.err != nil {
		return v, v.err
	}
	off := int64(-1)
	// A file can be read back: re-deliveries are then compared byte for byte and nothing is hashed.
	if ra, ok := r.(io.ReaderAt); ok {
		if sk, ok := r.(io.Seeker); ok {
			if pos, err := sk.Seek(0, io.SeekCurrent); err == nil {
				v.src, off = ra, pos
			}
		}
	}
	return v, v.run(r, off)
}

// run is the pipeline: read blocks of whole lines, parse them in parallel, accept them in order.
func (v *Verifier) run(r io.Reader, off int64) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan *block, workers)
	ordered := make(chan *block, workers+1)
	free := make(chan *block, 2*workers+3)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s scanner
			for b := range jobs {
				parseBlock(&s, b, v.src == nil, v.maxLine)
				close(b.done)
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(ordered)
		defer close(jobs)
		readErr <- readBlocks(r, off, v.maxLine, free, func(b *block) bool {
			select {
			case ordered <- b:
			case <-quit:
				return false
			}
			jobs <- b
			return true
		}, &v.torn)
	}()

	var err error
	for b := range ordered {
		<-b.done
		for i := 0; err == nil && i < len(b.lines); i++ {
			p := &b.lines[i]
			line := b.data[p.start:p.end]
			run := b.data[p.runAt : p.runAt+p.runLen]
			if p.runEsc {
				run = b.escaped[p.runAt]
			}
			var digest *[sha256.Size]byte
			if b.digests != nil {
				digest = &b.digests[i]
			}
			lineOff := int64(-1)
			if b.off >= 0 {
				lineOff = b.off + int64(p.start)
			}
			if err = v.accept(line, lineOff, run, p.seq, p.why, digest); err != nil {
				close(quit)
			}
		}
		if err == nil && b.tooLong > 0 {
			v.line++
			err = &Error{Line: v.line, Reason: whyTooLong.String(), Length: b.tooLong, Limit: v.maxLine, Err: ErrMalformed}
			close(quit)
		}
		select {
		case free <- b:
		default:
		}
	}
	wg.Wait()
	if rerr := <-readErr; err == nil && rerr != nil {
		err = fmt.Errorf("journal: read: %w", rerr)
	}
	return err
}
