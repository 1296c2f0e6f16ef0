package journal

import (
	"bytes"
	"fmt"

	"github.com/textmachine/outbox/outbox"
)

// errRefusedLine is outbox.ErrInvalidLine as a sink's refusal: errors.Is finds both sentinels, and the
// message names the outbox package once.
var errRefusedLine error = refusedLine{}

type refusedLine struct{}

func (refusedLine) Error() string {
	return outbox.ErrInvalidLine.Error() + " (the sink refuses the batch)"
}
func (refusedLine) Unwrap() []error { return []error{outbox.ErrInvalidLine, outbox.ErrSinkRefused} }

// checkLineBytes refuses a line no journal can hold, before anything is parsed.
func checkLineBytes(runID string, l outbox.EventLine) error {
	switch {
	case len(l.Line) == 0:
		return fmt.Errorf("journal: run %q seq %d: an empty line: %w", runID, l.Seq, errRefusedLine)
	case len(l.Line) > outbox.DefaultMaxLineSize:
		return fmt.Errorf("journal: run %q seq %d: the line is %d bytes, more than the limit of %d: %w",
			runID, l.Seq, len(l.Line), outbox.DefaultMaxLineSize, errRefusedLine)
	case bytes.IndexByte(l.Line, '\n') >= 0:
		return fmt.Errorf("journal: run %q seq %d: the line holds a newline: %w", runID, l.Seq, errRefusedLine)
	case l.Line[0] != '{':
		// OpenFile knows a torn last line by its first byte: a line of the file begins with '{'.
		return fmt.Errorf("journal: run %q seq %d: the line does not begin with '{': %w", runID, l.Seq, errRefusedLine)
	}
	return nil
}

// checkKeys parses each line of buf (the batch, each line followed by its newline) as the verifier
// does, and checks that it is runID's line of its EventLine.Seq, and that the seqs are consecutive.
func (j *File) checkKeys(runID string, lines []outbox.EventLine, buf []byte) error {
	start := 0
	for i, l := range lines {
		n, run, seq, w := j.scan.parseNext(buf[start:])
		start += n + 1
		switch {
		case w != whyNone:
			return fmt.Errorf("%w: run %q seq %d: %s: %w", ErrMalformed, runID, l.Seq, w, outbox.ErrSinkRefused)
		case n != len(l.Line):
			// Cannot happen: the line holds no newline, and parseNext ends a line at one.
			return fmt.Errorf("journal: run %q seq %d: the line was read as %d bytes of %d: %w", runID, l.Seq, n, len(l.Line), outbox.ErrSinkRefused)
		case string(run) != runID || seq != l.Seq:
			return fmt.Errorf("journal: run %q seq %d: the line says engine_run_id %q, seq %d: %w",
				runID, l.Seq, run, seq, outbox.ErrSinkRefused)
		case i > 0 && l.Seq != lines[i-1].Seq+1:
			return fmt.Errorf("%w: run %q: seq %d follows seq %d in one batch: %w",
				ErrStreamGap, runID, l.Seq, lines[i-1].Seq, outbox.ErrSinkRefused)
		}
	}
	return nil
}

// checkContinues refuses a batch of runID that starts more than one past the run's last seq in the
// journal. A batch that starts at 1 needs no look.
func (j *File) checkContinues(runID string, lines []outbox.EventLine) error {
	first := lines[0].Seq
	if first <= 1 {
		// A run's first batch needs no look back, which for a new run would read the whole file:
		// it is compared with the run's lines only when the part of the file read so far holds some.
		if last := j.runs.last[runID]; last >= 1 {
			return j.checkRedelivery(runID, lines, last)
		}
		return nil
	}
	last, err := j.runs.lastAtLeast(j, runID, first-1)
	if err != nil {
		return err
	}
	if last >= first {
		return j.checkRedelivery(runID, lines, last)
	}
	if last >= first-1 {
		return nil
	}
	if last == 0 {
		return fmt.Errorf("%w: run %q: the batch starts at seq %d, and %s holds no line of the run: %w",
			ErrStreamGap, runID, first, j.path, outbox.ErrSinkRefused)
	}
	return fmt.Errorf("%w: run %q: the batch starts at seq %d, and %s holds the run up to seq %d: %w",
		ErrStreamGap, runID, first, j.path, last, outbox.ErrSinkRefused)
}

// runIndex knows the highest seq of each run in the part of the file read so far: the file from
// offset from on, read backwards from the end on demand, plus every line appended since it was
// opened.
type runIndex struct {
	last  map[string]int64
	from  int64 // the start of a line; the file before it has not been read
	chunk []byte
	read  int64 // bytes read back so far
}

// scanChunk is how much of the file one step back reads; a longer line makes the step longer.
const scanChunk = 1 << 20

func (x *runIndex) init(from int64) { x.last, x.from = map[string]int64{}, from }

func (x *runIndex) note(run string, seq int64) {
	if cur, ok := x.last[run]; !ok || seq > cur {
		x.last[run] = seq
	}
}

// lastAtLeast returns run's highest seq in the file once it is at least need, or once the whole file
// has been read. A higher seq can lie further back than a lower one (a re-delivery after a crash
// repeats earlier lines), so a seq below need does not end the search.
func (x *runIndex) lastAtLeast(j *File, run string, need int64) (int64, error) {
	for {
		last := x.last[run]
		if last >= need || x.from == 0 {
			return last, nil
		}
		if err := x.stepBack(j); err != nil {
			return 0, err
		}
	}
}

// stepBack reads the whole lines that end at x.from and start within the scanChunk bytes before it
// (further, when one line is longer), and notes their runs. A line that is not a journal line is
// skipped: judging the file is the verifier's work, not the sink's.
func (x *runIndex) stepBack(j *File) error {
	end := x.from
	for n := int64(scanChunk); ; n *= 2 {
		start := max(0, end-n)
		if int64(cap(x.chunk)) < end-start {
			x.chunk = make([]byte, end-start)
		}
		b := x.chunk[:end-start]
		if _, err := j.f.ReadAt(b, start); err != nil {
			return fmt.Errorf("journal: read %s back from byte %d: %w", j.path, start, err)
		}
		x.read += int64(len(b))
		from := 0
		if start > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				continue // one line longer than n
			}
			from = i + 1
		}
		for rest := b[from:]; len(rest) > 0; {
			n, run, seq, w := j.scan.parseNext(rest)
			if w == whyNone {
				if cur, ok := x.last[string(run)]; !ok || seq > cur {
					x.last[string(run)] = seq
				}
			}
			rest = rest[min(n+1, len(rest)):]
		}
		x.from = start + int64(from)
		if x.chunk != nil && cap(x.chunk) > scanChunk {
			x.chunk = nil // a long line's buffer is not kept
		}
		return nil
	}
}

// checkRedelivery compares the lines of a batch that the run already has in the file (seqs up to
// last, its highest) with their copies there: a re-delivery after a crash carries the same bytes, and
// a line under a key the file holds with other bytes is a payload conflict, which the reader would
// quarantine the run for; a seq the file skips is a gap. The copies are found reading back from the
// end, where a re-delivered batch's lines were appended, until every one is found.
func (j *File) checkRedelivery(runID string, lines []outbox.EventLine, last int64) error {
	want := map[int64][]byte{}
	for _, l := range lines {
		if l.Seq <= last {
			want[l.Seq] = l.Line
		}
	}
	if len(want) == 0 {
		return nil
	}
	found := map[int64]bool{}
	var chunk []byte
	for end := j.size; end > 0 && len(found) < len(want); {
		start := max(0, end-scanChunk)
		for {
			if int64(cap(chunk)) < end-start {
				chunk = make([]byte, end-start)
			}
			b := chunk[:end-start]
			if _, err := j.f.ReadAt(b, start); err != nil {
				return fmt.Errorf("journal: read %s back from byte %d: %w", j.path, start, err)
			}
			from := 0
			if start > 0 {
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					start = max(0, end-2*(end-start)) // one line longer than the chunk
					continue
				}
				from = i + 1
			}
			for rest := b[from:]; len(rest) > 0; {
				n, run, seq, w := j.scan.parseNext(rest)
				if w == whyNone && string(run) == runID && !found[seq] {
					if line, ok := want[seq]; ok {
						if !bytes.Equal(rest[:n], line) {
							return fmt.Errorf("%w: run %q seq %d: %s holds the line with other bytes: %w",
								ErrPayloadConflict, runID, seq, j.path, outbox.ErrSinkRefused)
						}
						found[seq] = true
					}
				}
				rest = rest[min(n+1, len(rest)):]
			}
			end = start + int64(from)
			break
		}
	}
	for seq := range want {
		if !found[seq] {
			return fmt.Errorf("%w: run %q: %s holds the run up to seq %d but not seq %d: %w",
				ErrStreamGap, runID, j.path, last, seq, outbox.ErrSinkRefused)
		}
	}
	return nil
}
