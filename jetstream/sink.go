// Package jetstream projects an outbox to a NATS JetStream stream and checks such a stream, so that
// engines on many machines can feed one platform through a broker instead of files.
//
// # What the broker enforces
//
// Each run's lines go to their own subject, <prefix>.<run>. Every line is published with
// Nats-Msg-Id "<run>:<seq>" and Nats-Expected-Last-Subject-Sequence set to the stream sequence of the
// run's previous line, so the server itself refuses a line whose predecessor is not the one the sink
// placed: no gap can enter the stream, whatever the sink believes. The Msg-Id deduplicates
// re-deliveries only inside the stream's duplicate window; outside it, the sink recognises a
// re-delivery itself, by reading the stored line back and comparing bytes: identical is success, other
// bytes is a conflict (an error wrapping journal.ErrPayloadConflict and outbox.ErrSinkRefused, which
// stops that run's projection). The sink keeps, per run, the stream sequence of the last line it placed,
// and reads it back from the server (the subject's last message) on first use and after any error.
//
// Lines are published one at a time, each waiting for its acknowledgement: the expected sequence of a
// line is the stream sequence of the one before it, which is known only once that one is acknowledged.
// A window of asynchronous publishes would have to drop the expectation from all but the first, and a
// failure inside the window would then let later lines in behind a hole.
//
// # Durability
//
// JetStream acknowledges a message once its leader has it, before an fsync unless the server runs with
// sync always (the default syncs every two minutes). On a single server an acknowledged line can then
// be lost to power failure after the outbox has recorded it as projected. With three replicas an
// acknowledged line is on a majority of servers. So: replicas 3, or a single server with sync always,
// for lines that must survive power loss; WithMinReplicas makes the sink refuse a stream with fewer
// replicas than asked for.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// Errors of the sink. Refusals wrap outbox.ErrSinkRefused as well, so a relay stops on them.
var (
	// ErrGap: a line's predecessor is not in the stream.
	ErrGap = fmt.Errorf("jetstream: %w", journal.ErrStreamGap)
	// ErrConflict: the stream holds other bytes under the line's (run, seq).
	ErrConflict = fmt.Errorf("jetstream: %w", journal.ErrPayloadConflict)
	// ErrStreamSettings: the stream does not give the guarantee the sink was asked for.
	ErrStreamSettings = errors.New("jetstream: stream settings do not give the required guarantee")
)

// DefaultPrefix is the subject prefix lines are published under.
const DefaultPrefix = "outbox"

type config struct {
	prefix      string
	minReplicas int
}

// Option configures NewSink.
type Option func(*config) error

// WithSubjectPrefix sets the subject prefix (default "outbox"); the stream must capture <prefix>.>.
func WithSubjectPrefix(p string) Option {
	return func(c *config) error {
		if p == "" || strings.ContainsAny(p, " \t\r\n*>") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") {
			return fmt.Errorf("jetstream: invalid subject prefix %q", p)
		}
		c.prefix = p
		return nil
	}
}

// WithMinReplicas makes NewSink refuse a stream with fewer replicas (ErrStreamSettings). Three
// replicas keep an acknowledged line through the loss of one server and through power failure of a
// minority; see the package documentation.
func WithMinReplicas(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jetstream: min replicas %d, need at least 1", n)
		}
		c.minReplicas = n
		return nil
	}
}

// Sink is an outbox.Sink that publishes journal lines to a JetStream stream. It is safe for concurrent
// use; batches are placed one at a time.
type Sink struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	cfg    config

	mu   sync.Mutex
	last map[string]placed // per run, what the stream is known to hold; absent: read it from the server
}

// placed is a run's last line in the stream: its journal seq and its stream sequence.
type placed struct {
	seq       int64
	streamSeq uint64
}

var _ outbox.Sink = (*Sink)(nil)

// NewSink returns a sink publishing to the stream streamName, which must exist and capture the
// subjects <prefix>.>.
func NewSink(js jetstream.JetStream, streamName string, opts ...Option) (*Sink, error) {
	cfg := config{prefix: DefaultPrefix, minReplicas: 1}
	for _, o := range opts {
		if o != nil {
			if err := o(&cfg); err != nil {
				return nil, err
			}
		}
	}
	if js == nil || streamName == "" {
		return nil, errors.New("jetstream: NewSink needs a JetStream context and a stream name")
	}
	stream, err := js.Stream(context.Background(), streamName)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	if r := stream.CachedInfo().Config.Replicas; r < cfg.minReplicas {
		return nil, fmt.Errorf("%w: stream %q has %d replicas, %d required", ErrStreamSettings, streamName, r, cfg.minReplicas)
	}
	return &Sink{js: js, stream: stream, name: streamName, cfg: cfg, last: map[string]placed{}}, nil
}

// Subject returns the subject of a run's lines: the prefix, a dot, and the run id as one subject
// token, in which every byte but letters, digits, '-' and '_' is written as '~' and two hex digits.
func (s *Sink) Subject(runID string) string { return s.cfg.prefix + "." + Token(runID) }

// Token encodes a run id as a single subject token, reversibly.
func Token(runID string) string {
	var b strings.Builder
	for i := 0; i < len(runID); i++ {
		c := runID[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "~%02x", c)
		}
	}
	return b.String()
}

// Append places the lines in the stream, in order. A line the stream already holds with the same bytes
// is success; with other bytes, or without its predecessor, the error wraps outbox.ErrSinkRefused. Any
// error forgets what the sink believed of the run, so that the next attempt starts from the server.
func (s *Sink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range lines {
		run, seq, err := journal.LineKey(l.Line)
		if err != nil {
			return fmt.Errorf("jetstream: line %d: %w: %w", l.Seq, err, outbox.ErrSinkRefused)
		}
		if err := s.place(ctx, run, seq, l.Line); err != nil {
			delete(s.last, run)
			return err
		}
	}
	return nil
}

// place puts one line of run in the stream, or confirms the stream already holds it.
func (s *Sink) place(ctx context.Context, run string, seq int64, line []byte) error {
	subject := s.Subject(run)
	for attempt := 0; ; attempt++ {
		last, err := s.lastOf(ctx, run, subject)
		if err != nil {
			return err
		}
		switch {
		case seq <= last.seq:
			return s.confirm(ctx, run, subject, seq, line, last)
		case seq > last.seq+1:
			return fmt.Errorf("%w: run %q: the stream ends at seq %d, the line is seq %d: %w",
				ErrGap, run, last.seq, seq, outbox.ErrSinkRefused)
		}
		msg := nats.NewMsg(subject)
		msg.Data = line
		ack, err := s.js.PublishMsg(ctx, msg,
			jetstream.WithMsgID(run+":"+strconv.FormatInt(seq, 10)),
			jetstream.WithExpectLastSequencePerSubject(last.streamSeq))
		if err == nil && ack.Duplicate {
			// The Msg-Id was seen inside the duplicate window: the stream holds a line under this
			// key, which the next round compares.
			delete(s.last, run)
			continue
		}
		if err == nil {
			s.last[run] = placed{seq: seq, streamSeq: ack.Sequence}
			return nil
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) && attempt == 0 {
			// What the sink believed is stale (another sink, a crash between publish and record):
			// read the subject back once and decide again.
			delete(s.last, run)
			continue
		}
		return fmt.Errorf("jetstream: publish seq %d of run %q: %w", seq, run, err)
	}
}

// lastOf returns what the stream holds last for run, from memory or from the server.
func (s *Sink) lastOf(ctx context.Context, run, subject string) (placed, error) {
	if p, ok := s.last[run]; ok {
		return p, nil
	}
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		s.last[run] = placed{}
		return placed{}, nil
	}
	if err != nil {
		return placed{}, fmt.Errorf("jetstream: read the last line of run %q: %w", run, err)
	}
	_, seq, err := journal.LineKey(msg.Data)
	if err != nil {
		return placed{}, fmt.Errorf("jetstream: the last message on %s: %w: %w", subject, err, outbox.ErrSinkRefused)
	}
	p := placed{seq: seq, streamSeq: msg.Sequence}
	s.last[run] = p
	return p, nil
}

// confirm checks that the stream holds line as the run's seq. A run's subject holds its lines in seq
// order, one message per seq, so the message is found by bisecting stream sequences with "the next
// message on this subject at or after": a few requests, without scanning.
func (s *Sink) confirm(ctx context.Context, run, subject string, seq int64, line []byte, last placed) error {
	msg, err := s.find(ctx, subject, seq, last)
	if err != nil {
		return fmt.Errorf("jetstream: read back seq %d of run %q: %w", seq, run, err)
	}
	if msg == nil {
		return fmt.Errorf("%w: run %q: seq %d is not in the stream, though a later one is: %w", ErrGap, run, seq, outbox.ErrSinkRefused)
	}
	if string(msg.Data) != string(line) {
		return fmt.Errorf("%w: run %q, seq %d: the stream holds other bytes: %w", ErrConflict, run, seq, outbox.ErrSinkRefused)
	}
	return nil
}

func (s *Sink) find(ctx context.Context, subject string, seq int64, last placed) (*jetstream.RawStreamMsg, error) {
	if seq == last.seq {
		return s.stream.GetMsg(ctx, last.streamSeq)
	}
	lo, hi := uint64(1), last.streamSeq // the message is at a stream sequence in [lo, hi]
	for lo <= hi {
		mid := lo + (hi-lo)/2
		msg, err := s.stream.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			return nil, err
		}
		_, got, err := journal.LineKey(msg.Data)
		if err != nil {
			return nil, err
		}
		switch {
		case got == seq:
			return msg, nil
		case got < seq:
			lo = msg.Sequence + 1
		default:
			// The first message at or after mid is past seq: seq, if present, is before mid.
			if mid == 0 {
				return nil, nil
			}
			hi = mid - 1
		}
	}
	return nil, nil
}
