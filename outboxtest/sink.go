// SPDX-License-Identifier: Apache-2.0

package outboxtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// Sink is an outbox.Sink that keeps in memory what a journal file would hold. Before it keeps
// anything it checks a batch as journal.File.Append does, and refuses it whole, with an error
// wrapping outbox.ErrSinkRefused, for:
//
//   - a line that is empty, holds a newline, does not begin with '{', or is longer than
//     outbox.DefaultMaxLineSize (these wrap outbox.ErrInvalidLine too);
//   - a line that is not a journal line (journal.ErrMalformed), or whose own engine_run_id is not
//     the batch's run or whose own seq is not its EventLine.Seq (journal.CheckLine);
//   - a batch that would leave a gap (journal.ErrStreamGap): seqs that are not consecutive, or a
//     first seq more than one past the run's last;
//   - a line the sink holds with other bytes (journal.ErrPayloadConflict).
//
// A batch that starts at or before the run's last seq is a re-delivery, as a relay sends after a
// crash: its lines the sink holds are compared and not kept twice, the rest are appended. What the
// file does beyond the lines (fsync, locks, a full disk) has no counterpart here. It is safe for
// concurrent use.
type Sink struct {
	mu    sync.Mutex
	runs  map[string][][]byte // each run's lines, seq i+1 at index i
	order [][]byte            // every line kept, in the order kept
	err   error
}

// NewSink returns an empty Sink.
func NewSink() *Sink { return &Sink{runs: map[string][][]byte{}} }

// Append checks the batch and keeps its new lines, or refuses it whole (see Sink). While SetErr has
// set an error, it returns that error and keeps nothing.
func (s *Sink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	for i, l := range lines {
		if why := unfit(l.Line); why != "" {
			return fmt.Errorf("%w: %w: run %q seq %d: %s", outbox.ErrSinkRefused, outbox.ErrInvalidLine, runID, l.Seq, why)
		}
		if err := journal.CheckLine(runID, l.Seq, l.Line); err != nil {
			return fmt.Errorf("%w: run %q seq %d: %w", outbox.ErrSinkRefused, runID, l.Seq, err)
		}
		if i > 0 && l.Seq != lines[i-1].Seq+1 {
			return fmt.Errorf("%w: %w: run %q: seq %d follows seq %d in the batch", outbox.ErrSinkRefused, journal.ErrStreamGap, runID, l.Seq, lines[i-1].Seq)
		}
	}
	held := s.runs[runID]
	if len(lines) > 0 && lines[0].Seq > int64(len(held))+1 {
		return fmt.Errorf("%w: %w: run %q: the batch starts at seq %d, the sink holds up to seq %d", outbox.ErrSinkRefused, journal.ErrStreamGap, runID, lines[0].Seq, len(held))
	}
	for _, l := range lines {
		if l.Seq <= int64(len(held)) && !bytes.Equal(held[l.Seq-1], l.Line) {
			return fmt.Errorf("%w: %w: run %q seq %d came again with other bytes", outbox.ErrSinkRefused, journal.ErrPayloadConflict, runID, l.Seq)
		}
	}
	for _, l := range lines {
		if l.Seq > int64(len(held)) {
			b := bytes.Clone(l.Line)
			held = append(held, b)
			s.order = append(s.order, b)
		}
	}
	s.runs[runID] = held
	return nil
}

// unfit says why a line could be no line of a journal file whatever its content, or "".
func unfit(line []byte) string {
	switch {
	case len(line) == 0:
		return "an empty line"
	case len(line) > outbox.DefaultMaxLineSize:
		return fmt.Sprintf("the line is %d bytes, more than the limit of %d", len(line), outbox.DefaultMaxLineSize)
	case bytes.IndexByte(line, '\n') >= 0:
		return "the line holds a newline"
	case line[0] != '{':
		return "the line does not begin with '{'"
	}
	return ""
}

// SetErr makes every later Append return err and keep nothing, as a sink that is down does; nil
// makes it accept again.
func (s *Sink) SetErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Lines returns every line the sink holds, each once, in the order it took them: what a journal
// file holds, without its re-deliveries. The slices are copies.
func (s *Sink) Lines() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clone(s.order)
}

// RunLines returns the lines of runID the sink holds, seq 1 first. The slices are copies.
func (s *Sink) RunLines(runID string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clone(s.runs[runID])
}

// Runs returns the ids of the runs the sink holds lines of, sorted.
func (s *Sink) Runs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, ls := range s.runs {
		if len(ls) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func clone(ls [][]byte) [][]byte {
	out := make([][]byte, len(ls))
	for i, l := range ls {
		out[i] = bytes.Clone(l)
	}
	return out
}
