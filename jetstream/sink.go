// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/textmachine/outbox/internal/keyedturn"
	"github.com/textmachine/outbox/outbox"
)

const (
	// DefaultPrefix is the subject prefix lines are published under.
	DefaultPrefix = "outbox"
	// MaxSubjectLen bounds a run's subject plus the stream's name, in bytes: a quarter of the server's
	// default max control line (4,096) is left for the rest of any protocol line that carries them
	// (a publication's reply subject and sizes, a read's API prefix).
	MaxSubjectLen = 3072
	// DefaultBatchLimit is the server's default limit on an atomic batch, in messages.
	DefaultBatchLimit = 1000
	// headerRoom is what the sink's headers (Msg-Id aside) may take of a message: the batch id,
	// sequence and commit, the expected sequence, and the framing.
	headerRoom = 512
)

// Mode is how a sink publishes.
type Mode int

const (
	// OneAtATime publishes each line and waits for its acknowledgement before the next: the path for a
	// stream without atomic publish.
	OneAtATime Mode = iota
	// AtomicBatches publishes each Append as atomic batches.
	AtomicBatches
)

func (m Mode) String() string {
	if m == AtomicBatches {
		return "atomic batches"
	}
	return "one at a time"
}

type config struct {
	prefix      string
	minReplicas int
}

// Option configures NewSink. WithSubjectPrefix configures CreateStream too.
type Option interface{ sinkOption(*config) error }

type sinkOptionFunc func(*config) error

func (f sinkOptionFunc) sinkOption(c *config) error { return f(c) }

// WithSubjectPrefix sets the subject prefix (default "outbox"): one or more subject tokens of letters,
// digits, '-' and '_', separated by dots. The stream must capture <prefix>.>. Given to ApplyStream
// and FollowStream, it is their subject filter, <prefix>.>; given to Trim, the lines it trims.
func WithSubjectPrefix(p string) interface {
	Option
	StreamOption
	ConsumeOption
	TrimOption
} {
	return prefixOption(p)
}

type prefixOption string

func (p prefixOption) sinkOption(c *config) error {
	if err := validPrefix(string(p)); err != nil {
		return err
	}
	c.prefix = string(p)
	return nil
}

func (p prefixOption) streamOption(c *streamConfig) error {
	if err := validPrefix(string(p)); err != nil {
		return err
	}
	c.prefix = string(p)
	return nil
}

func validPrefix(p string) error {
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || Token(tok) != tok {
			return fmt.Errorf("jetstream: invalid subject prefix %q: want dot-separated tokens of letters, digits, '-' and '_'", p)
		}
	}
	if len(p) > 256 {
		return fmt.Errorf("jetstream: subject prefix of %d bytes, at most 256", len(p))
	}
	return nil
}

// WithMinReplicas makes NewSink refuse a stream with fewer replicas (ErrStreamSettings). Three
// replicas keep an acknowledged line through the loss of one server and through power failure of a
// minority; see the package documentation.
func WithMinReplicas(n int) Option {
	return sinkOptionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jetstream: min replicas %d, need at least 1", n)
		}
		c.minReplicas = n
		return nil
	})
}

// Sink is an outbox.Sink that publishes journal lines to a JetStream stream. It is safe for concurrent
// use. The batches of one run are placed one at a time, each after the one before is acknowledged;
// batches of different runs (several relays projecting to one stream through one sink) are in flight
// together, so that one run's wait for the server's staging store, its sync and the acknowledgement
// does not hold up the others.
type Sink struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	cfg    config

	mu         sync.Mutex // guards what follows; never held across a request to the server
	maxMsgSize int        // the stream's limit on one message, 0 for none
	mode       Mode
	limit      int                // messages per atomic batch
	kv         jetstream.KeyValue // the readers' bucket, once found
	last       map[string]placed  // per run, what the stream is known to hold; absent: read it from the server

	// turns order the Appends of one run: the next batch's expectation is the stream sequence the
	// one before ended at, so only one batch of a run can be in flight.
	turns keyedturn.Turns[struct{}]
}

// placed is a run's last line in the stream: its journal seq and its stream sequence.
type placed struct {
	seq       int64
	streamSeq uint64
}

var _ outbox.Sink = (*Sink)(nil)

// NewSink returns a sink publishing to the stream streamName, which must exist (CreateStream makes
// one) with settings that do not contradict the sink's needs: it must capture <prefix>.>, keep
// messages in files under the limits retention policy, acknowledge publications, neither be sealed nor
// transform subjects, and have no limit that deletes lines (see CreateStream). Otherwise the error
// wraps ErrStreamSettings and says what to change.
// The sink publishes in atomic batches when the stream allows atomic publish, one line at a time
// otherwise (Mode).
func NewSink(js jetstream.JetStream, streamName string, opts ...Option) (*Sink, error) {
	cfg := config{prefix: DefaultPrefix, minReplicas: 1}
	for _, o := range opts {
		if o != nil {
			if err := o.sinkOption(&cfg); err != nil {
				return nil, err
			}
		}
	}
	if js == nil || streamName == "" {
		return nil, errors.New("jetstream: NewSink needs a JetStream context and a stream name")
	}
	if !validStreamName(streamName) {
		return nil, fmt.Errorf("jetstream: invalid stream name %q", streamName)
	}
	stream, err := js.Stream(context.Background(), streamName)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	sc := stream.CachedInfo().Config
	if problems := sinkProblems(sc, cfg); len(problems) > 0 {
		return nil, fmt.Errorf("%w: stream %q: %s", ErrStreamSettings, streamName, strings.Join(problems, "; "))
	}
	s := &Sink{js: js, stream: stream, name: streamName, cfg: cfg, maxMsgSize: int(max(sc.MaxMsgSize, 0)),
		limit: DefaultBatchLimit, last: map[string]placed{}}
	if sc.AllowAtomicPublish {
		s.mode = AtomicBatches
	}
	return s, nil
}

// Mode says whether the sink publishes atomic batches or one line at a time. A sink falls back to one
// at a time for good if the server stops accepting atomic batches on the stream.
func (s *Sink) Mode() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// BatchSize is the relay batch that suits the sink: the atomic batch limit with atomic batches, where
// each batch costs the server a staging store and the run one round trip; outbox.DefaultBatchSize one
// line at a time, where the batch size does not change the cost per line. outbox.NewRelay takes it on
// its own (the sink is an outbox.BatchSizer): there is nothing to pass, and outbox.WithBatchSize
// overrides it.
func (s *Sink) BatchSize() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode == AtomicBatches {
		return s.limit
	}
	return outbox.DefaultBatchSize
}

// Subject returns the subject of a run's lines: the prefix, a dot, and Token(runID).
func (s *Sink) Subject(runID string) string { return s.cfg.prefix + "." + Token(runID) }

// Append places the lines of runID in the stream, in order, after checking all of them (see the
// package documentation). A line the stream already holds with the same bytes is success; with other
// bytes, or without its predecessor, the error wraps outbox.ErrSinkRefused. Any error forgets what the
// sink believed of the run, so that the next attempt starts from the server.
//
// An Append waits for the one of the same run under way, if any, and gives up with ctx's error when
// ctx ends first; Appends of other runs do not wait for it.
func (s *Sink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if len(lines) == 0 {
		return nil
	}
	subject, err := s.checkBatch(runID, lines)
	if err != nil {
		return err
	}
	release, err := s.takeTurn(ctx, runID)
	if err != nil {
		return err
	}
	defer release()
	if err := s.place(ctx, runID, subject, lines); err != nil {
		s.forgetLast(runID)
		return err
	}
	return nil
}

// SinkRuns lists the runs the stream holds under the sink's prefix, each with its highest seq, sorted
// by run id: the outbox.RunLister a relay compares with its book at its first call. It is one stream
// info request (paged by the server, a subject a run), reading no message: the stream keeps a count of
// messages per subject, and the sink places each seq of a run once, from 1, in a stream whose limits
// delete nothing (NewSink refuses any other), so a run's count is its last seq. A message deleted
// from the stream by hand makes its run's count lower than its last seq: the comparison can then miss
// that run, never name one wrongly. A subject under the prefix that is not a run's (see Token) is
// left out.
func (s *Sink) SinkRuns(ctx context.Context) ([]outbox.SinkRun, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.cfg.prefix+".>"))
	if err != nil {
		return nil, fmt.Errorf("jetstream: list the runs of stream %s: %w", s.name, err)
	}
	out := make([]outbox.SinkRun, 0, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		tok, ok := strings.CutPrefix(subject, s.cfg.prefix+".")
		if !ok || strings.IndexByte(tok, '.') >= 0 || n == 0 || n > math.MaxInt64 {
			continue
		}
		if run, ok := runOfToken(tok); ok {
			out = append(out, outbox.SinkRun{RunID: run, LastSeq: int64(n)})
		}
	}
	slices.SortFunc(out, func(a, b outbox.SinkRun) int { return strings.Compare(a.RunID, b.RunID) })
	return out, nil
}

var _ outbox.RunLister = (*Sink)(nil)
