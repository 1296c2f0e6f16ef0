// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/keyedturn"
	"github.com/textmachine/outbox/journal"
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

// MsgID returns the Nats-Msg-Id of a run's line: Token(runID), a colon, and the seq.
func MsgID(runID string, seq int64) string { return Token(runID) + ":" + strconv.FormatInt(seq, 10) }

// Token encodes a run id as a single subject token, reversibly: letters, digits, '-' and '_' stay, any
// other byte becomes '~' and two lowercase hex digits.
func Token(runID string) string {
	var b strings.Builder
	b.Grow(len(runID))
	for i := 0; i < len(runID); i++ {
		c := runID[i]
		if tokenByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('~')
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&15])
		}
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// runOfToken decodes a token; ok is false when tok is not one Token makes.
func runOfToken(tok string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case tokenByte(c):
			b.WriteByte(c)
		case c == '~' && i+2 < len(tok) && isLowerHex(tok[i+1]) && isLowerHex(tok[i+2]):
			v, _ := strconv.ParseUint(tok[i+1:i+3], 16, 8)
			if tokenByte(byte(v)) {
				return "", false // Token writes such a byte as itself
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), tok != ""
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

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
	subject, err := s.check(runID, lines)
	if err != nil {
		return err
	}
	release, err := s.takeTurn(ctx, runID)
	if err != nil {
		return err
	}
	defer release()
	if err := s.place(ctx, runID, subject, lines); err != nil {
		s.forget(runID)
		return err
	}
	return nil
}

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

// forget drops what the sink believed of run: the next Append reads it from the server.
func (s *Sink) forget(run string) {
	s.mu.Lock()
	delete(s.last, run)
	s.mu.Unlock()
}

// check refuses a batch that must not reach the stream, before any of it is published.
func (s *Sink) check(runID string, lines []outbox.EventLine) (string, error) {
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
		last, err := s.lastOf(ctx, run, subject)
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
		s.forget(run)
		if attempt > 0 {
			if stale.duplicate {
				return fmt.Errorf("%w: run %q: the stream answers that a Msg-Id of seqs %d..%d (%s..) is a duplicate, yet holds the run's subject only up to seq %d: %w",
					ErrConflict, run, stale.from, stale.to, MsgID(run, stale.from), last.seq, outbox.ErrSinkRefused)
			}
			return fmt.Errorf("jetstream: run %q: the stream's last line moved twice while publishing: %w", run, stale.err)
		}
	}
}

// lastOf returns what the stream holds last for run, from memory or from the server.
func (s *Sink) lastOf(ctx context.Context, run, subject string) (placed, error) {
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
