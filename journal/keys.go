// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
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
func (j *runLog) checkKeys(runID string, lines []outbox.EventLine, buf []byte) error {
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
// journal, and compares every line of it that the journal already holds with its copy there, wherever
// in the journal that is (see runIndex). The caller has built the index.
func (j *runLog) checkContinues(ctx context.Context, runID string, lines []outbox.EventLine) error {
	first := lines[0].Seq
	last := j.runs.last(runID)
	switch {
	case first <= last:
		return j.checkRedelivery(ctx, runID, lines, last)
	case first == last+1:
		return nil
	case last == 0:
		return fmt.Errorf("%w: run %q: the batch starts at seq %d, and %s holds no line of the run: %w",
			ErrStreamGap, runID, first, j.name, outbox.ErrSinkRefused)
	}
	return fmt.Errorf("%w: run %q: the batch starts at seq %d, and %s holds the run up to seq %d: %w",
		ErrStreamGap, runID, first, j.name, last, outbox.ErrSinkRefused)
}
