// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// takeTurn waits until no other Append of run is under way, or ctx ends; release ends the turn.
func (s *Sink) takeTurn(ctx context.Context, run string) (release func(), err error) {
	t, err := s.turns.Take(ctx, run, nil)
	if err != nil {
		return nil, err
	}
	return func() { s.turns.Release(run, t) }, nil
}

// lastKnown returns what the sink believes the stream holds last for run; ok is false when it must
// read it from the server.
func (s *Sink) lastKnown(run string) (p placed, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok = s.last[run]
	return p, ok
}

// trimmedOf returns the highest seq of run's lines Trim removed from the stream (0: none, or no
// trimmer ever ran), from the stream's readers' bucket.
func (s *Sink) trimmedOf(ctx context.Context, run string) (int64, error) {
	s.mu.Lock()
	kv := s.kv
	s.mu.Unlock()
	if kv == nil {
		var err error
		kv, err = readersBucket(ctx, s.js, s.name, 0, false)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return 0, nil // looked for again next time: a trimmer may create it meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("jetstream: read what was trimmed of run %q: %w", run, err)
		}
		s.mu.Lock()
		s.kv = kv
		s.mu.Unlock()
	}
	n, err := uintValue(ctx, kv, trimKeyPrefix+keyEscape(Token(run)))
	if err != nil {
		return 0, fmt.Errorf("jetstream: read what was trimmed of run %q: %w", run, err)
	}
	return int64(min(n, uint64(1)<<62)), nil
}

// setLast records what the stream holds last for run.
func (s *Sink) setLast(run string, p placed) {
	s.mu.Lock()
	s.last[run] = p
	s.mu.Unlock()
}

// forgetLast drops what the sink believed of run: the next Append reads it from the server.
func (s *Sink) forgetLast(run string) {
	s.mu.Lock()
	delete(s.last, run)
	s.mu.Unlock()
}

// checkBatch refuses a batch that must not reach the stream, before any of it is published.
func (s *Sink) checkBatch(runID string, lines []outbox.EventLine) (string, error) {
	if runID == "" {
		return "", fmt.Errorf("jetstream: append with an empty run id: %w", outbox.ErrSinkRefused)
	}
	subject := s.Subject(runID)
	if n := len(subject) + len(s.name); n > MaxSubjectLen {
		return "", fmt.Errorf("%w: run %.64q…: its subject and the stream name take %d bytes, at most %d: %w",
			ErrTooLarge, runID, n, MaxSubjectLen, outbox.ErrSinkRefused)
	}
	maxMsg := int(s.js.Conn().MaxPayload())
	s.mu.Lock()
	if s.maxMsgSize > 0 && s.maxMsgSize < maxMsg {
		maxMsg = s.maxMsgSize
	}
	s.mu.Unlock()
	for i, l := range lines {
		run, seq, err := journal.LineKey(l.Line)
		switch {
		case err != nil:
			return "", fmt.Errorf("%w: run %q, seq %d: %w: %w", ErrLineKey, runID, l.Seq, err, outbox.ErrSinkRefused)
		case run != runID || seq != l.Seq:
			return "", fmt.Errorf("%w: run %q, seq %d: the line says run %q, seq %d: %w",
				ErrLineKey, runID, l.Seq, run, seq, outbox.ErrSinkRefused)
		case bytes.IndexByte(l.Line, '\n') >= 0:
			return "", fmt.Errorf("%w: run %q, seq %d: the line holds a newline: %w", ErrLineKey, runID, l.Seq, outbox.ErrSinkRefused)
		case i > 0 && l.Seq != lines[i-1].Seq+1:
			return "", fmt.Errorf("%w: run %q: seq %d follows seq %d in one batch: %w", ErrGap, runID, l.Seq, lines[i-1].Seq, outbox.ErrSinkRefused)
		}
		if n := len(l.Line) + len(MsgID(runID, l.Seq)) + len(subject) + headerRoom + traceHeaderLen(l.Line); maxMsg > 0 && n > maxMsg {
			return "", fmt.Errorf("%w: run %q, seq %d: %d bytes with headers, the server takes %d: %w",
				ErrTooLarge, runID, l.Seq, n, maxMsg, outbox.ErrSinkRefused)
		}
	}
	return subject, nil
}

// place puts lines (checked, consecutive) of run in the stream, or confirms the stream holds them.
func (s *Sink) place(ctx context.Context, run, subject string, lines []outbox.EventLine) error {
	for attempt := 0; ; attempt++ {
		last, err := s.lastPlaced(ctx, run, subject)
		if err != nil {
			return err
		}
		held := 0
		for held < len(lines) && lines[held].Seq <= last.seq {
			held++
		}
		if held > 0 {
			if err := s.confirm(ctx, run, subject, lines[:held], last); err != nil {
				return err
			}
		}
		rest := lines[held:]
		if len(rest) == 0 {
			return nil
		}
		if rest[0].Seq > last.seq+1 {
			return fmt.Errorf("%w: run %q: the stream ends at seq %d, the batch starts at seq %d: %w",
				ErrGap, run, last.seq, rest[0].Seq, outbox.ErrSinkRefused)
		}
		err = s.publish(ctx, run, subject, rest, last)
		var stale *staleError
		if !errors.As(err, &stale) {
			return err
		}
		// What the sink believed is stale (another sink, a crash between publish and record): read
		// the run back once and decide again. A second stale answer after a fresh read is not staleness.
		s.forgetLast(run)
		if attempt > 0 {
			if stale.duplicate {
				return fmt.Errorf("%w: run %q: the stream answers that a Msg-Id of seqs %d..%d (%s..) is a duplicate, yet holds the run's subject only up to seq %d: %w",
					ErrConflict, run, stale.from, stale.to, MsgID(run, stale.from), last.seq, outbox.ErrSinkRefused)
			}
			return fmt.Errorf("jetstream: run %q: the stream's last line moved twice while publishing: %w", run, stale.err)
		}
	}
}

// lastPlaced returns what the stream holds last for run, from memory or from the server.
func (s *Sink) lastPlaced(ctx context.Context, run, subject string) (placed, error) {
	if p, ok := s.lastKnown(run); ok {
		return p, nil
	}
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// No line of the run: a new run, or one whose every line Trim removed, which goes on
		// after the last of them.
		trimmed, err := s.trimmedOf(ctx, run)
		if err != nil {
			return placed{}, err
		}
		p := placed{seq: trimmed}
		s.setLast(run, p)
		return p, nil
	}
	if err != nil {
		return placed{}, fmt.Errorf("jetstream: read the last line of run %q: %w", run, err)
	}
	got, seq, err := journal.LineKey(msg.Data)
	if err == nil && got != run {
		err = fmt.Errorf("%w: engine_run_id %q", journal.ErrMalformed, got)
	}
	if err != nil {
		return placed{}, fmt.Errorf("jetstream: the last message on %s (stream sequence %d) is not run %q's line: %w: %w",
			subject, msg.Sequence, run, err, outbox.ErrSinkRefused)
	}
	p := placed{seq: seq, streamSeq: msg.Sequence}
	s.setLast(run, p)
	return p, nil
}
