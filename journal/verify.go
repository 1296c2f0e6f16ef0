// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"io"

	"github.com/textmachine/outbox/outbox"
)

// Report is what Verify found.
type Report struct {
	Lines      int // distinct lines accepted
	Duplicates int // re-deliveries of an accepted (run, seq), skipped: byte-identical, or Unchecked
	// Unchecked counts the Duplicates that repeat a seq older than the run's repeat window
	// (WithRepeatWindow): their key is checked, their bytes are not compared with the first copy.
	Unchecked int
	TornTail  bool // the input ended in a line without its newline (not an error)
	// Start is the journal-wide position of the first byte read: not 0 for a journal directory
	// whose first segments retention removed. Runs may then begin at any seq (RunReport.First).
	Start int64
	Runs  map[string]RunReport
}

// RunReport is one run's part of a Report.
type RunReport struct {
	// First is, when the input is a part of a journal (WithPartial, a trimmed directory), the run's
	// first seq read; 0 otherwise, where every run begins at seq 1.
	First      int64
	Last       int64 // the highest seq accepted
	Lines      int
	Duplicates int
	Unchecked  int // Duplicates older than the repeat window, not compared byte for byte
}

// Error locates a problem Verify found. It wraps ErrStreamGap, ErrPayloadConflict or ErrMalformed.
type Error struct {
	Line int // 1-based line number in the input (in a directory: in the journal, across segments)
	// Segment names the segment file that holds the line, and SegmentLine its 1-based number there,
	// when the input is a journal directory (VerifyDir).
	Segment     string
	SegmentLine int
	Run         string // the line's run, when it could be read
	Seq         int64  // the line's seq, when it could be read
	Expected    int64  // for a gap: the seq that should have come
	Reason      string // for a malformed line: what is wrong with it
	Length      int64  // for a line too long: its length, or as much of it as was read before Verify stopped
	Limit       int    // for a line too long: the longest line allowed (WithMaxLineSize)
	Err         error
}

func (e *Error) Error() string {
	at := fmt.Sprintf("line %d", e.Line)
	if e.Segment != "" {
		at = fmt.Sprintf("segment %s line %d (journal line %d)", e.Segment, e.SegmentLine, e.Line)
	}
	switch e.Err {
	case ErrStreamGap:
		return fmt.Sprintf("journal: %s: stream gap in run %q: expected seq %d, found %d", at, e.Run, e.Expected, e.Seq)
	case ErrPayloadConflict:
		return fmt.Sprintf("journal: %s: payload conflict in run %q at seq %d: same seq, other bytes", at, e.Run, e.Seq)
	}
	if e.Limit > 0 {
		return fmt.Sprintf("journal: %s: malformed line: %s (at least %d bytes; the limit is %d)", at, e.Reason, e.Length, e.Limit)
	}
	return fmt.Sprintf("journal: %s: malformed line: %s", at, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Verifier checks a journal line by line. Verify reads a whole stream with one; a reader of another
// transport (a broker's stream) feeds its lines to Check. Use NewVerifier.
//
// Its memory is bounded per run, not per line: each run keeps its counts, and the runs appended to
// most recently (windowRuns of them) keep a 64-bit hash of each of their last lines (the repeat
// window), to which a re-delivery is compared. The relay re-sends at most the lines it had in flight when it
// stopped, two batches, so a legitimate re-delivery repeats a run's last lines; an older repeat is
// accepted by its key alone and counted as Unchecked.
type Verifier struct {
	maxLine int
	window  int   // seqs per run in the repeat window
	partial bool  // runs may begin at any seq
	err     error // an invalid option

	line      int
	lines     int
	dups      int
	unchecked int
	torn      bool
	runs      map[string]*runState
	scan      scanner

	seed maphash.Seed // of the lines' hashes in the windows: chosen at random, unknown to any writer

	// The runs holding a window, most recently appended to first.
	head, tail *runState
	windows    int
}

// runState is what a Verifier keeps of a run. win holds the digest of seq s at (s-1)%len(win) for
// the seqs from max(winFrom, last-len(win)+1) to last; a run without a window has winFrom 0.
type runState struct {
	first, last            int64
	lines, dups, unchecked int
	win                    []uint64
	winFrom                int64
	prev, next             *runState
}

// DefaultRepeatWindow is how many of each run's last seqs a Verifier compares a re-delivery with,
// unless WithRepeatWindow says otherwise: two relay batches of the default size
// (outbox.DefaultBatchSize).
const DefaultRepeatWindow = 2 * outbox.DefaultBatchSize

// windowRuns is how many runs hold a repeat window at once: the runs appended to most recently. An
// engine appends to one run at a time and recovers earlier ones one after another, so a re-delivery
// follows its first copy within a few runs; this bounds the windows to windowRuns*DefaultRepeatWindow
// hashes (1 MiB) however many runs the journal holds.
const windowRuns = 256

// firstWindow is the size a run's window starts at; it doubles up to the repeat window, so that a
// short run costs a few digests.
const firstWindow = 8

// remember records the digest of seq, the run's new last seq, in its window.
func (v *Verifier) remember(st *runState, seq int64, d uint64) {
	if st.winFrom == 0 {
		st.win, st.winFrom = make([]uint64, min(firstWindow, v.window)), seq
		v.windows++
		if v.windows > windowRuns {
			v.drop(v.tail)
		}
	} else {
		v.unlink(st)
		if n := int64(len(st.win)); seq-st.winFrom >= n && int(n) < v.window {
			grown := make([]uint64, min(2*int(n), v.window))
			for s := max(st.winFrom, st.last-n+1); s <= st.last; s++ {
				grown[(s-1)%int64(len(grown))] = st.win[(s-1)%n]
			}
			st.win = grown
		}
	}
	st.win[(seq-1)%int64(len(st.win))] = d
	// To the front of the list.
	st.prev, st.next = nil, v.head
	if v.head != nil {
		v.head.prev = st
	}
	v.head = st
	if v.tail == nil {
		v.tail = st
	}
}

// held returns the digest the window holds for seq, or nil.
func (st *runState) held(seq int64) *uint64 {
	n := int64(len(st.win))
	if st.winFrom == 0 || seq < st.winFrom || seq <= st.last-n {
		return nil
	}
	return &st.win[(seq-1)%n]
}

func (v *Verifier) unlink(st *runState) {
	if st.prev != nil {
		st.prev.next = st.next
	} else {
		v.head = st.next
	}
	if st.next != nil {
		st.next.prev = st.prev
	} else {
		v.tail = st.prev
	}
	st.prev, st.next = nil, nil
}

// drop takes st's window away: its older repeats are then checked by key only.
func (v *Verifier) drop(st *runState) {
	v.unlink(st)
	st.win, st.winFrom = nil, 0
	v.windows--
}

// VerifyOption configures Verify, VerifyDir and NewVerifier.
type VerifyOption func(*verifyConfig) error

type verifyConfig struct {
	maxLine int
	window  int
	partial bool
}

// MaxLineSizeLimit is the largest limit WithMaxLineSize takes: the verifier holds a line whole to
// parse it, so the limit is what a line may cost the reader's memory. It is larger than
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

// maxRepeatWindow bounds WithRepeatWindow: the windows of windowRuns runs at this size take 512 MiB.
const maxRepeatWindow = 1 << 18

// WithRepeatWindow sets how many of a run's last seqs a re-delivery is compared with byte for byte
// (by hash): DefaultRepeatWindow unless set; n must be from 1 to 262,144. A repeat of an older
// seq is accepted by its key alone and counted in Report.Unchecked. Memory grows with n: 8 bytes
// a seq for each of the 256 runs appended to most recently.
func WithRepeatWindow(n int) VerifyOption {
	return func(c *verifyConfig) error {
		if n < 1 || n > maxRepeatWindow {
			return fmt.Errorf("journal: WithRepeatWindow(%d): the window must be from 1 to %d", n, maxRepeatWindow)
		}
		c.window = n
		return nil
	}
}

// WithPartial says the input is a part of a journal that may begin after some runs' first lines (a
// segment file other than the first, or what retention left of a journal): a run's first line may
// have any seq, which its RunReport's First records; from it on, the rules are the same. VerifyDir
// sets it by itself when the directory's first segment does not begin at position 0.
func WithPartial() VerifyOption {
	return func(c *verifyConfig) error {
		c.partial = true
		return nil
	}
}

// NewVerifier returns a Verifier with nothing seen.
func NewVerifier(opts ...VerifyOption) *Verifier {
	c := verifyConfig{maxLine: outbox.DefaultMaxLineSize, window: DefaultRepeatWindow}
	var err error
	for _, o := range opts {
		if err == nil && o != nil {
			err = o(&c)
		}
	}
	return &Verifier{maxLine: c.maxLine, window: c.window, partial: c.partial, err: err, runs: map[string]*runState{}, seed: maphash.MakeSeed()}
}

// Check checks the next complete line (without its newline). It returns an *Error for a gap, a
// conflict or a malformed line; the line is then not counted, and the Verifier's state is what it
// was before it.
func (v *Verifier) Check(line []byte) error {
	if v.err != nil {
		return v.err
	}
	if len(line) > v.maxLine {
		return v.tooLong(int64(len(line)))
	}
	run, seq, w := v.scan.parse(line)
	v.line++
	if w != whyNone {
		return &Error{Line: v.line, Run: string(run), Seq: seq, Reason: w.String(), Err: ErrMalformed}
	}
	return v.accept(run, seq, maphash.Bytes(v.seed, line))
}

// tooLong is the error for the next line, of at least n bytes, over the limit.
func (v *Verifier) tooLong(n int64) error {
	v.line++
	return &Error{Line: v.line, Reason: whyTooLong.String(), Length: n, Limit: v.maxLine, Err: ErrMalformed}
}

// accept applies the reader's rules to a well-formed line, the next in input order; digest is its
// hash.
func (v *Verifier) accept(run []byte, seq int64, digest uint64) error {
	st := v.runs[string(run)] // no allocation: the compiler looks up by the bytes
	var last int64
	switch {
	case st != nil:
		last = st.last
	case v.partial:
		last = seq - 1
	}
	switch {
	case seq == last+1:
		if st == nil {
			st = &runState{}
			if v.partial {
				st.first = seq
			}
			v.runs[string(run)] = st
		}
		v.remember(st, seq, digest)
		st.last = seq
		st.lines++
		v.lines++
	case seq <= last:
		first := st.held(seq)
		if first != nil && *first != digest {
			return &Error{Line: v.line, Run: string(run), Seq: seq, Err: ErrPayloadConflict}
		}
		if first == nil {
			st.unchecked++
			v.unchecked++
		}
		st.dups++
		v.dups++
	default:
		return &Error{Line: v.line, Run: string(run), Seq: seq, Expected: last + 1, Err: ErrStreamGap}
	}
	return nil
}

// Report returns what the Verifier has accepted so far.
func (v *Verifier) Report() Report {
	r := Report{Lines: v.lines, Duplicates: v.dups, Unchecked: v.unchecked, TornTail: v.torn, Runs: make(map[string]RunReport, len(v.runs))}
	for id, st := range v.runs {
		r.Runs[id] = RunReport{First: st.first, Last: st.last, Lines: st.lines, Duplicates: st.dups, Unchecked: st.unchecked}
	}
	return r
}

// Verify reads a journal and checks it: each run starts at seq 1 and goes up by one; a (run, seq)
// seen before is a duplicate when its bytes are identical and a conflict when not; runs interleave
// freely. A last line without its newline is a torn tail, reported but not an error. On an error, the
// Report covers the lines before it.
//
// A repeat is compared with the first copy by a 64-bit hash (hash/maphash, its seed chosen at random
// for each Verifier, so that no writer can aim a conflicting line at the hash of its first copy: two
// lines differ and pass as the same with a chance of one in 2^64) while the first copy is one of the run's last
// seqs (the repeat window: DefaultRepeatWindow, two relay batches, or WithRepeatWindow), and the run
// is among the 256 appended to most recently: the relay re-sends only what it had in flight. An older
// repeat has its key checked (it is a seq the run already has) and is counted in Report.Unchecked,
// not compared.
//
// Verify reads r a buffer at a time and passes each line to Check, on the calling goroutine: its
// verdict is Check's, line by line.
//
// A line longer than the limit (WithMaxLineSize, by default outbox.DefaultMaxLineSize) is
// ErrMalformed "line too long", found while reading: the buffer grows for a long line up to the limit
// and a byte, never past it, so Verify reads no more of such a line than that.
//
// Memory does not grow with the journal's lines: each run costs a small constant, about 200 bytes
// (BenchmarkVerifyManyRuns), and the repeat windows at most 1 MiB by default.
func Verify(r io.Reader, opts ...VerifyOption) (Report, error) {
	v := NewVerifier(opts...)
	if v.err != nil {
		return v.Report(), v.err
	}
	err := v.run(context.Background(), r)
	return v.Report(), err
}

// verify is Verify, returning the Verifier.
func verify(r io.Reader, opts []VerifyOption) (*Verifier, error) {
	v := NewVerifier(opts...)
	if v.err != nil {
		return v, v.err
	}
	return v, v.run(context.Background(), r)
}

// readSize is the buffer Verify reads into: a read call per MiB costs nothing beside parsing the MiB.
// A line longer than the buffer grows it.
const readSize = 1 << 20

// run checks r's lines with Check, reading r a buffer at a time. It stops before the next read once
// ctx is done.
func (v *Verifier) run(ctx context.Context, r io.Reader) error {
	buf := make([]byte, readSize)
	start, end := 0, 0 // buf[start:end] is read and not yet checked: the beginning of a line
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := r.Read(buf[end:])
		end += n
		for {
			i := bytes.IndexByte(buf[start:end], '\n')
			if i < 0 {
				break
			}
			if err := v.Check(buf[start : start+i]); err != nil {
				return err
			}
			start += i + 1
		}
		switch {
		case rerr == io.EOF && end-start > v.maxLine:
			return v.tooLong(int64(end - start))
		case rerr == io.EOF:
			v.torn = end > start
			return nil
		case rerr != nil:
			return fmt.Errorf("journal: read: %w", rerr)
		}
		// Keep the part-line at the front. Past the limit it is refused now, without reading the
		// rest of it; when it fills the buffer, the buffer doubles, up to the limit and a byte (a
		// line that fills that without a newline is over the limit).
		end = copy(buf, buf[start:end])
		start = 0
		switch {
		case end > v.maxLine:
			return v.tooLong(int64(end))
		case end == len(buf):
			grown := make([]byte, min(2*len(buf), v.maxLine+1))
			copy(grown, buf)
			buf = grown
		}
	}
}
