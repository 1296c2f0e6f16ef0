// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// batch is what one transaction applies: lines with their stream sequences and subjects.
type batch struct {
	lines    [][]byte
	seqs     []uint64
	subjects []string
	size     int
	hole     int // the index of the first line after a hole in stream sequences; -1: none
}

// readBatch reads the next batch: up to the inbox's bounds, or fewer when the consumer holds no more
// (its last message's pending count is 0) or, for ApplyStream, at the target. done says the session
// has read all it is to read.
func (s *streamSource) readBatch(ctx context.Context, c *consumer, follow bool) (b *batch, done bool, err error) {
	b = &batch{hole: -1}
	prev, front := s.prev, s.front
	for {
		m, err := c.next(ctx, max(s.b.Poll, 10*time.Millisecond))
		switch {
		case ctx.Err() != nil:
			return nil, false, ctx.Err()
		case errors.Is(err, nats.ErrTimeout) && len(b.lines) > 0:
			return b, false, nil
		case errors.Is(err, nats.ErrTimeout) && follow:
			if moved, err := s.positionMoved(ctx); err != nil || moved {
				return nil, false, errors.Join(err, errRestartIf(moved))
			}
			continue
		case errors.Is(err, nats.ErrTimeout):
			// The consumer said it held more but delivered nothing (a message deleted meanwhile,
			// or a server in trouble): start again from the stored position.
			return nil, false, errRestart
		case err != nil:
			return nil, false, s.broker(err, "read from sequence %d", prev+1)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, false, s.broker(err, "read a message's metadata after sequence %d", prev)
		}
		seq := meta.Sequence.Stream
		if len(b.lines) > 0 && (len(b.lines) >= s.b.Lines || b.size+len(m.Data()) > s.b.Bytes) {
			c.heldMsg = m
			return b, false, nil
		}
		if seq <= prev && front {
			return nil, false, errRestart // never expected of an ordered consumer: read again rather than trust it
		}
		if front && seq > max(prev, s.floor)+1 && b.hole < 0 {
			b.hole = len(b.lines)
		}
		b.lines = append(b.lines, m.Data())
		b.seqs = append(b.seqs, seq)
		b.subjects = append(b.subjects, m.Subject())
		b.size += len(m.Data())
		prev, front = seq, true
		if !follow && seq >= s.target {
			return b, true, nil
		}
		if meta.NumPending == 0 {
			return b, !follow, nil
		}
	}
}

func errRestartIf(moved bool) error {
	if moved {
		return errRestart
	}
	return nil
}

// positionMoved reports whether the stored position is no longer the one this call stored (a Release).
func (s *streamSource) positionMoved(ctx context.Context) (bool, error) {
	pos, err := s.in.SourcePosition(ctx, s.source)
	if err != nil {
		return false, err
	}
	return !bytes.Equal(pos, s.stored), nil
}

// commitBatch applies a batch with its last stream sequence as the position, after checking each
// message and the holes in stream sequences: a malformed message or a retention gap stops it, the
// lines before it applied.
func (s *streamSource) commitBatch(ctx context.Context, b *batch) error {
	n, stop := len(b.lines), error(nil)
	for i := range b.lines {
		if err := s.checkMessage(b.subjects[i], b.seqs[i], b.lines[i]); err != nil {
			n, stop = i, err
			break
		}
	}
	if b.hole >= 0 && b.hole < n {
		before := s.prev
		if b.hole > 0 {
			before = b.seqs[b.hole-1]
		}
		if err := s.checkFront(ctx, before); err != nil {
			var be *brokerError
			if errors.As(err, &be) {
				return err
			}
			n, stop = b.hole, err
		}
	}
	if n > 0 {
		if err := s.applyLines(ctx, b, n); err != nil {
			return err
		}
	}
	return stop
}

// applyLines applies b's first n lines, storing the last one's stream sequence with them. A line the
// inbox refuses as malformed is named by its subject and stream sequence, the lines before it
// applied.
func (s *streamSource) applyLines(ctx context.Context, b *batch, n int) error {
	err := s.store(ctx, b.lines[:n], b.seqs[n-1])
	var le *inbox.LineError
	if !errors.As(err, &le) || le.Index < 0 || le.Index >= n {
		return err
	}
	if le.Index > 0 {
		if err := s.store(ctx, b.lines[:le.Index], b.seqs[le.Index-1]); err != nil {
			return err
		}
	}
	return fmt.Errorf("jetstream: stream %q, subject %s, stream sequence %d: %w", s.name, b.subjects[le.Index], b.seqs[le.Index], le)
}

// store applies lines and stores seq as the position with them, in one transaction.
func (s *streamSource) store(ctx context.Context, lines [][]byte, seq uint64) error {
	p := StreamPosition{Seq: seq, Created: s.created}
	if s.floor > seq {
		p.Floor = s.floor // still reading again below it: kept, so that a restart keeps it too
	}
	to := p.encode()
	rep, err := s.in.ApplyFrom(ctx, s.source, s.stored, to, lines, s.h)
	if errors.Is(err, inbox.ErrSourceMoved) {
		return errRestart
	}
	if err != nil {
		var le *inbox.LineError
		if errors.As(err, &le) {
			return err
		}
		return fmt.Errorf("jetstream: stream %q, the batch of %d lines to stream sequence %d: %w", s.name, len(lines), seq, err)
	}
	s.rep.Applied += rep.Applied
	s.rep.Duplicates += rep.Duplicates
	s.rep.Stale += rep.Stale
	s.rep.Quarantined += rep.Quarantined
	s.stored, s.prev, s.front, s.floor = to, seq, true, p.Floor
	s.commits++
	// After the commit, never before: a key that lags is safe, one ahead would let a trimmer remove
	// what a crash here makes this inbox read again. A failed write leaves it lagging until the next.
	if err := s.register(ctx, seq); errors.Is(err, ErrReaderNameShared) {
		return err
	} else if err != nil && ctx.Err() == nil {
		s.b.Logger.Warn("jetstream: could not register the reader's position; it lags until the next commit",
			"stream", s.name, "reader", s.in.ReaderName(), "seq", seq, "err", err)
	}
	if afterStreamCommit != nil {
		afterStreamCommit(s.source, seq)
	}
	return nil
}

// afterStreamCommit, when set, is called after each batch a stream source commits (tests and
// benchmarks).
var afterStreamCommit func(source string, seq uint64)

// beforeConsume, when set, is called between a session's first look at the stream and the start of
// its ordered consumer (tests).
var beforeConsume func()

// advanceToTarget stores the target as the position once everything of the filter up to it is applied, so
// that a position read through a filter keeps up with the stream's other subjects; then a later
// removal of their messages is not taken for a gap.
func (s *streamSource) advanceToTarget(ctx context.Context) error {
	if s.target == 0 {
		return nil
	}
	if s.stored != nil {
		if p, err := ParseStreamPosition(s.stored); err == nil && p.Seq >= s.target && p.Created.Equal(s.created) {
			return nil
		}
	}
	return s.store(ctx, nil, s.target)
}

// checkMessage refuses a message that is not one journal line of its subject's run: the sink never
// publishes one, and the inbox never skips what it cannot attribute.
func (s *streamSource) checkMessage(subject string, seq uint64, line []byte) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("jetstream: stream %q, subject %s, stream sequence %d: %w: %s",
			s.name, subject, seq, journal.ErrMalformed, fmt.Sprintf(format, a...))
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		return bad("the message holds a newline")
	}
	run, _, err := journal.LineKey(line)
	if err != nil {
		return bad("%v", err)
	}
	if want := s.cfg.prefix + "." + Token(run); subject != want {
		return bad("engine_run_id %q is not the subject's run (its subject is %s)", run, want)
	}
	return nil
}
