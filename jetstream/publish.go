// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// staleError is a server's answer that the sink's view of a run is out of date: the subject's last
// sequence is not the expected one, or a Msg-Id was seen before.
type staleError struct {
	from, to  int64 // the seqs the refused publication held
	duplicate bool
	err       error
}

func (e *staleError) Error() string { return e.err.Error() }
func (e *staleError) Unwrap() error { return e.err }

// publish places lines, which follow last, through the sink's path, and records each placed part.
func (s *Sink) publish(ctx context.Context, run, subject string, lines []outbox.EventLine, last placed) error {
	if s.Mode() == AtomicBatches {
		n, err := s.publishBatches(ctx, run, subject, lines, last)
		if !hasCode(err, jetstreamext.JSErrCodeBatchPublishNotEnabled) {
			return err
		}
		// The stream no longer allows atomic publish: go on one at a time, for good.
		s.mu.Lock()
		s.mode = OneAtATime
		s.mu.Unlock()
		lines = lines[n:]
		last, _ = s.lastKnown(run)
	}
	return s.publishEach(ctx, run, subject, lines, last)
}

// publishBatches publishes lines as consecutive atomic batches of at most s.limit messages, the first
// message of each expecting the subject's last sequence to be the one the previous batch ended at. It
// returns how many lines it placed.
func (s *Sink) publishBatches(ctx context.Context, run, subject string, lines []outbox.EventLine, last placed) (int, error) {
	done := 0
	for done < len(lines) {
		if err := ctx.Err(); err != nil {
			return done, err // before the first message: a batch never committed holds the server's staging until it times out
		}
		chunk := lines[done:min(len(lines), done+s.batchMax())]
		msgs := make([]*nats.Msg, len(chunk))
		for i, l := range chunk {
			m := nats.NewMsg(subject)
			m.Data = l.Line
			m.Header.Set(jetstream.MsgIDHeader, MsgID(run, l.Seq))
			setTraceHeaders(m.Header, l.Line)
			if i == 0 {
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last.streamSeq, 10))
			}
			msgs[i] = m
		}
		// No acknowledgement of the first message: the server checks the expectation at the commit,
		// and a batch it abandoned stores nothing, so waiting for it would only add a round trip.
		ack, err := jetstreamext.PublishMsgBatch(ctx, s.js, msgs, jetstreamext.BatchFlowControl{})
		if err != nil {
			if limit, ok := batchLimit(err); ok && limit < len(chunk) {
				s.mu.Lock()
				s.limit = min(s.limit, limit)
				s.mu.Unlock()
				continue
			}
			if hasCode(err, jetstream.JSErrCodeStreamMessageExceedsMaximum) {
				return done, s.tooLarge(ctx, run, subject, chunk, err)
			}
			return done, publishError(err, run, chunk)
		}
		last = placed{seq: chunk[len(chunk)-1].Seq, streamSeq: ack.Sequence}
		s.setLast(run, last)
		done += len(chunk)
	}
	return done, nil
}

// publishEach publishes lines one at a time, each expecting the stream sequence of the one before.
func (s *Sink) publishEach(ctx context.Context, run, subject string, lines []outbox.EventLine, last placed) error {
	for _, l := range lines {
		msg := nats.NewMsg(subject)
		msg.Data = l.Line
		setTraceHeaders(msg.Header, l.Line)
		ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(MsgID(run, l.Seq)),
			jetstream.WithExpectLastSequencePerSubject(last.streamSeq))
		if err == nil && ack.Duplicate {
			return &staleError{from: l.Seq, to: l.Seq, duplicate: true, err: errors.New("duplicate Msg-Id")}
		}
		if hasCode(err, jetstream.JSErrCodeStreamMessageExceedsMaximum) {
			return s.tooLarge(ctx, run, subject, []outbox.EventLine{l}, err)
		}
		if err != nil {
			return publishError(err, run, []outbox.EventLine{l})
		}
		last = placed{seq: l.Seq, streamSeq: ack.Sequence}
		s.setLast(run, last)
	}
	return nil
}

// publishError turns a refused publication of lines into a *staleError when the refusal says the
// sink's view is stale, and wraps it with the run and seqs otherwise.
func publishError(err error, run string, lines []outbox.EventLine) error {
	from, to := lines[0].Seq, lines[len(lines)-1].Seq
	switch {
	case hasCode(err, jetstream.JSErrCodeStreamWrongLastSequence), hasCode(err, jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return &staleError{from: from, to: to, err: err}
	case hasCode(err, jetstreamext.JSErrCodeBatchPublishDuplicateMsgID):
		return &staleError{from: from, to: to, duplicate: true, err: err}
	}
	return fmt.Errorf("jetstream: publish seqs %d..%d of run %q: %w", from, to, run, err)
}

// tooLarge is the refusal of lines the server answered "message size exceeds maximum allowed": a
// limit lowered after NewSink, which no retry cures. It reads the stream's limit anew, so that the
// error names it and later batches are refused before they are published, and names the first line
// past it (the largest, when none is by the sink's count of its headers).
func (s *Sink) tooLarge(ctx context.Context, run, subject string, lines []outbox.EventLine, cause error) error {
	limit, what := int(s.js.Conn().MaxPayload()), "the server's max payload"
	info, err := s.stream.Info(ctx)
	if err == nil && info.Config.MaxMsgSize > 0 {
		s.mu.Lock()
		s.maxMsgSize = int(info.Config.MaxMsgSize)
		s.mu.Unlock()
		if m := int(info.Config.MaxMsgSize); m <= limit || limit <= 0 {
			limit, what = m, "the stream's max message size"
		}
	}
	over := lines[0]
	for _, l := range lines {
		if len(l.Line) > len(over.Line) {
			over = l
		}
	}
	for _, l := range lines {
		if len(l.Line)+len(MsgID(run, l.Seq))+len(subject)+headerRoom+traceHeaderLen(l.Line) > limit {
			over = l
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: run %q, seq %d: the server refused a line of %d bytes as past the stream's max message size (%v), and reading the limit failed: %v: %w",
			ErrTooLarge, run, over.Seq, len(over.Line), cause, err, outbox.ErrSinkRefused)
	}
	return fmt.Errorf("%w: run %q, seq %d: a line of %d bytes, which with its headers the server refused as past %s, now %d bytes (%v): %w",
		ErrTooLarge, run, over.Seq, len(over.Line), what, limit, cause, outbox.ErrSinkRefused)
}

// batchMax is how many messages an atomic batch may hold, as far as the sink knows.
func (s *Sink) batchMax() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

func hasCode(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}

// batchLimit reads the server's batch limit from its "batch is too large: N" answer.
func batchLimit(err error) (int, bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstreamext.JSErrCodeBatchPublishExceedsLimit {
		return 0, false
	}
	d := apiErr.Description
	n, perr := strconv.Atoi(strings.TrimSpace(d[strings.LastIndexByte(d, ':')+1:]))
	return n, perr == nil && n >= 1
}

// confirm checks that the stream holds lines, consecutive and at or before last, byte for byte. The
// first is found by bisection, the rest by reading on along the subject.
func (s *Sink) confirm(ctx context.Context, run, subject string, lines []outbox.EventLine, last placed) error {
	var msg *jetstream.RawStreamMsg
	var err error
	trimmed := int64(-1)
	for _, l := range lines {
		if msg == nil {
			msg, err = s.find(ctx, subject, l.Seq, last)
		} else {
			msg, err = s.next(ctx, subject, msg.Sequence+1)
		}
		if err != nil {
			return fmt.Errorf("jetstream: read back seq %d of run %q: %w", l.Seq, run, err)
		}
		if msg != nil {
			if _, got, _ := journal.LineKey(msg.Data); got != l.Seq {
				msg = nil
			}
		}
		if msg == nil {
			// Trim removes a run's oldest lines, every reader having applied them, after recording
			// the highest: such a line was held, and its bytes are no longer there to compare.
			if trimmed < 0 {
				if trimmed, err = s.trimmedOf(ctx, run); err != nil {
					return err
				}
			}
			if l.Seq <= trimmed {
				continue
			}
			return fmt.Errorf("%w: run %q: seq %d is not in the stream, though seq %d is: %w", ErrGap, run, l.Seq, last.seq, outbox.ErrSinkRefused)
		}
		if string(msg.Data) != string(l.Line) {
			return fmt.Errorf("%w: run %q, seq %d: the stream holds other bytes (stream sequence %d): %w",
				ErrConflict, run, l.Seq, msg.Sequence, outbox.ErrSinkRefused)
		}
	}
	return nil
}

// next returns the subject's first message at or after stream sequence from, or nil.
func (s *Sink) next(ctx context.Context, subject string, from uint64) (*jetstream.RawStreamMsg, error) {
	msg, err := s.stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return msg, err
}

// find returns the message of the run's line seq, or nil. A run's subject holds its lines in seq
// order, one message per seq, so the message is found by bisecting stream sequences with "the next
// message on this subject at or after": a few requests, without scanning.
func (s *Sink) find(ctx context.Context, subject string, seq int64, last placed) (*jetstream.RawStreamMsg, error) {
	if seq == last.seq {
		if last.streamSeq == 0 {
			return nil, nil // every line of the run was trimmed
		}
		msg, err := s.stream.GetMsg(ctx, last.streamSeq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		return msg, err
	}
	lo, hi := uint64(1), last.streamSeq // the message is at a stream sequence in [lo, hi]
	for lo <= hi {
		mid := lo + (hi-lo)/2
		msg, err := s.next(ctx, subject, mid)
		if err != nil {
			return nil, err
		}
		got := int64(-1)
		if msg != nil {
			if _, got, err = journal.LineKey(msg.Data); err != nil {
				return nil, fmt.Errorf("the message at stream sequence %d: %w: %w", msg.Sequence, err, outbox.ErrSinkRefused)
			}
		}
		switch {
		case got == seq:
			return msg, nil
		case msg != nil && got < seq:
			lo = msg.Sequence + 1
		default:
			// Nothing at or after mid, or the first message there is past seq: seq, if present, is
			// before mid.
			hi = mid - 1
		}
	}
	return nil, nil
}
