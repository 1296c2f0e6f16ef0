// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// streamSource is one call of ApplyStream or FollowStream.
type streamSource struct {
	js     jetstream.JetStream
	name   string // the stream's
	cfg    consumeConfig
	filter string
	source string // the inbox's name for the position
	in     *inbox.Inbox
	h      inbox.Handler
	b      inbox.SourceBounds

	stream  jetstream.Stream
	created time.Time // the stream's, stored in each position
	stored  []byte    // the position as the inbox holds it (nil: none)
	// prev is the last stream sequence read through; front says whether a message after a hole
	// following it must be checked against the stream's first sequence (not when reading from the
	// stream's start, which is what was asked for then).
	prev  uint64
	front bool
	// floor is the position a Release or an AcceptGap rewound the source from, while the source
	// reads the stream again below it: everything of the filter up to it was applied, so only a
	// message after it that the stream no longer holds is a retention gap. 0: none.
	floor uint64

	kv     jetstream.KeyValue // the stream's readers' bucket, where the position is registered
	capped uint64             // the bucket's capped mark as begin read it

	target    uint64 // ApplyStream: the stream's last sequence when the call began
	targetSet bool
	rep       inbox.Report
	commits   int // batches committed by the call: progress, which resets FollowStream's backoff
	following bool
}

// request bounds a request to the server when following: one lost in a server's restart would
// otherwise wait out the connection's whole request timeout (5 s by default) for an answer that never
// comes, where asking again costs nothing. ApplyStream keeps the caller's timeout.
func (s *streamSource) request(ctx context.Context) (context.Context, context.CancelFunc) {
	if !s.following {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, max(2*time.Second, 2*s.b.Poll))
}

// errRestart ends a session so that the next one starts from the position stored: a Release moved
// it, or the consumer stopped delivering what it said it held.
var errRestart = errors.New("jetstream: read again from the stored position")

// brokerError is an error of the server or the connection, as opposed to one of the lines or the
// inbox: FollowStream waits and reads on after it.
type brokerError struct{ err error }

func (e *brokerError) Error() string { return e.err.Error() }
func (e *brokerError) Unwrap() error { return e.err }

func (s *streamSource) broker(err error, format string, a ...any) error {
	return &brokerError{fmt.Errorf("jetstream: stream %q: %s: %w", s.name, fmt.Sprintf(format, a...), err)}
}

// apply is ApplyStream: sessions until one reaches the target.
func (s *streamSource) apply(ctx context.Context) error {
	for {
		err := s.session(ctx, false)
		if !errors.Is(err, errRestart) {
			return err
		}
	}
}

// follow is FollowStream: sessions until ctx ends or an error that is not the broker's.
func (s *streamSource) follow(ctx context.Context) error {
	s.following = true
	const firstWait = 20 * time.Millisecond
	wait, commits := firstWait, 0
	for {
		err := s.session(ctx, true)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var be *brokerError
		switch {
		case errors.Is(err, errRestart):
			continue
		case errors.As(err, &be) && errors.Is(err, jetstream.ErrStreamNotFound):
			// A platform is often started before the engine that creates its stream: wait for it,
			// as FollowFile waits for a missing file. A stream deleted under a stored position
			// comes back as a stream created again, which begin reports as a retention gap.
			if err := s.waitForStream(ctx); err != nil {
				return err
			}
			wait = firstWait
			continue
		case !errors.As(err, &be) || errors.Is(err, nats.ErrConnectionClosed):
			return err
		}
		if s.commits != commits {
			wait, commits = firstWait, s.commits // it went on for a while: this is a new failure
		}
		s.b.Logger.Warn("jetstream: reading the stream failed; reading on from the stored position", "stream", s.name, "err", err, "in", wait)
		// A request sent to a server going down, or while the connection is down, waits out the
		// whole request timeout (5 s by default) for an answer that never comes: wait until the
		// server answers a ping first.
		for first := true; first || s.js.Conn().FlushTimeout(max(wait, 100*time.Millisecond)) != nil; first = false {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			wait = min(2*wait, max(s.b.Poll, 20*time.Millisecond))
		}
	}
}

// waitForStream waits, looking at the inbox's poll interval, until the stream exists or ctx ends.
// Errors of the broker meanwhile are waited out too; a closed connection ends the wait.
func (s *streamSource) waitForStream(ctx context.Context) error {
	s.b.Logger.Info("jetstream: the stream does not exist yet; waiting for it", "stream", s.name, "poll", s.b.Poll)
	every := max(s.b.Poll, 20*time.Millisecond)
	for {
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		rctx, cancel := s.request(ctx)
		_, err := s.js.Stream(rctx, s.name)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("jetstream: stream %q: waiting for it: %w", s.name, err)
		}
	}
}

// session reads with one ordered consumer from the stored position: ApplyStream's to the target,
// FollowStream's until something ends it.
func (s *streamSource) session(ctx context.Context, follow bool) error {
	start, last, err := s.begin(ctx)
	if err != nil {
		return err
	}
	if !follow && !s.targetSet {
		s.target, s.targetSet = last, true
	}
	if !follow && (s.target == 0 || start > s.target) {
		return s.advance(ctx)
	}
	if beforeConsume != nil {
		beforeConsume()
	}
	c, err := s.consume(ctx, start)
	if err != nil {
		return err
	}
	defer c.stop(s)
	if c.pending == 0 && !follow {
		// Nothing of the filter from the consumer's start to the stream's end. But a consumer asked
		// to start below the stream's first sequence starts at the first, silently: the messages
		// removed since begin looked (a purge meanwhile) are not pending either. The stream's first
		// sequence, read after the consumer was created, says whether its start was the one asked
		// for.
		if s.front { // not when reading from the first message held, which is what was asked for
			if err := s.checkFront(ctx, s.prev); err != nil {
				return err
			}
		}
		return s.advance(ctx)
	}
	for {
		b, done, err := s.fill(ctx, c, follow)
		if err != nil {
			return err
		}
		if err := s.commitBatch(ctx, b); err != nil {
			return err
		}
		if done {
			return s.advance(ctx)
		}
	}
}

// begin reads the stored position and the stream's state, and says where to read from (0: the
// stream's first message) and the stream's last sequence now. A stream that no longer holds what
// follows the position is a retention gap, unless accepted. A source that a Release or an AcceptGap
// rewound reads the stream from its first message, with the position it was rewound from as the
// floor of the check.
func (s *streamSource) begin(ctx context.Context) (start, last uint64, err error) {
	start, last, err = s.look(ctx)
	if err != nil {
		return 0, 0, err
	}
	// Registered before anything is read, at what the session reads after: a trimmer that runs
	// meanwhile keeps it, and the key never names a message this inbox has not committed.
	if err := s.register(ctx, max(start, 1)-1); errors.Is(err, ErrReaderNameShared) {
		return 0, 0, err
	} else if err != nil {
		return 0, 0, s.broker(err, "register reader %q in %s", s.in.ReaderName(), ReadersBucket(s.name))
	}
	return start, last, nil
}

// register writes seq, in the stream read now, as this reader's position in the readers' bucket.
// Once this Inbox wrote the key, it writes only over its own last write (the key's revision): a key
// anyone else wrote meanwhile is another consumer, with an inbox of its own, reading under the same
// name, and each would overwrite the other's position, so that the key could run ahead of one of
// them. That is ErrReaderNameShared. A key removed meanwhile (ForgetReader) is written again. Calls
// on one Inbox share its writes: they read positions of the same database.
func (s *streamSource) register(ctx context.Context, seq uint64) error {
	rctx, cancel := s.request(ctx)
	defer cancel()
	if registerStep != nil {
		registerStep("before_register")
	}
	key, val := readerKeyPrefix+keyEscape(s.in.ReaderName()), StreamPosition{Seq: seq, Created: s.created}.encode()
	w := writerOf(s.in, ReadersBucket(s.name), key)
	w.mu.Lock()
	rev, err := w.write(rctx, s.kv, key, val)
	w.tried = val
	if err == nil {
		w.rev = rev
	}
	w.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrReaderNameShared) {
			err = fmt.Errorf("%w: reader %q of stream %q (its inbox at stream sequence %d): give each consumer its own name (inbox.WithReaderName)",
				err, s.in.ReaderName(), s.name, seq)
		}
		return err
	}
	if registerStep != nil {
		registerStep("after_register")
	}
	return nil
}

// keyWriter is what an Inbox last wrote to a reader's key: its revision (0: nothing yet) and the
// value last tried.
type keyWriter struct {
	mu    sync.Mutex
	rev   uint64
	tried []byte
}

type keyWriterID struct {
	in          weak.Pointer[inbox.Inbox]
	bucket, key string
}

// keyWriters holds a keyWriter per Inbox and key, dropped when the Inbox is collected.
var keyWriters sync.Map // keyWriterID → *keyWriter

func writerOf(in *inbox.Inbox, bucket, key string) *keyWriter {
	id := keyWriterID{weak.Make(in), bucket, key}
	if w, ok := keyWriters.Load(id); ok {
		return w.(*keyWriter)
	}
	w, loaded := keyWriters.LoadOrStore(id, &keyWriter{})
	if !loaded {
		runtime.AddCleanup(in, func(id keyWriterID) { keyWriters.Delete(id) }, id)
	}
	return w.(*keyWriter)
}

// write writes val to key over the Inbox's last write; the caller holds w.mu.
func (w *keyWriter) write(ctx context.Context, kv jetstream.KeyValue, key string, val []byte) (uint64, error) {
	if w.rev == 0 {
		return kv.Put(ctx, key, val)
	}
	rev, err := kv.Update(ctx, key, val, w.rev)
	if err == nil || !wrongLastSeq(err) {
		return rev, err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return kv.Put(ctx, key, val) // forgotten while this reader reads: it registers again
	case err != nil:
		return 0, err
	case w.tried != nil && bytes.Equal(e.Value(), w.tried):
		// The Inbox's own last write, which reached the server though its answer did not come
		// back (a timeout, a failover); or another consumer at the same position, which does no
		// harm yet and shows at the next write that differs.
		return kv.Update(ctx, key, val, e.Revision())
	}
	got := string(e.Value())
	if p, err := ParseStreamPosition(e.Value()); err == nil {
		got = p.String()
	}
	return 0, fmt.Errorf("%w: its key %s in %s holds %s, which this consumer did not write", ErrReaderNameShared, key, kv.Bucket(), got)
}

// wrongLastSeq says whether err is the server's refusal of a write whose expected last sequence of
// its subject (a key's revision) is not the subject's.
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// registerStep, when set, is called just before a reader writes its key and just after the write
// succeeded (tests: a process killed there).
var registerStep func(step string)

func (s *streamSource) look(ctx context.Context) (start, last uint64, err error) {
	pos, from, err := s.in.SourceState(ctx, s.source)
	if err != nil {
		return 0, 0, err
	}
	s.stored = pos
	rctx, cancel := s.request(ctx)
	stream, err := s.js.Stream(rctx, s.name)
	cancel()
	if err != nil {
		return 0, 0, s.broker(err, "read its state")
	}
	s.stream = stream
	info := stream.CachedInfo()
	// A stream none of whose subjects is under the filter holds no line for it: reading it would
	// find nothing and store a position for good, so that pointing a source at the wrong stream, or
	// with the wrong prefix, would look like an idle journal. A mirror's or a sourced stream's
	// messages keep their origin's subjects, whatever its own, and are read.
	if cfg := info.Config; cfg.Mirror == nil && len(cfg.Sources) == 0 && !capturesAll(cfg.Subjects, s.cfg.prefix) {
		return 0, 0, fmt.Errorf("%w: stream %q: subjects %q do not capture %s: it is not a stream of that prefix",
			ErrStreamSettings, s.name, cfg.Subjects, s.filter)
	}
	s.created = info.Created
	st := info.State
	rctx, cancel = s.request(ctx)
	s.kv, err = readersBucket(rctx, s.js, s.name, info.Config.Replicas, true)
	if err == nil {
		s.capped, err = uintValue(rctx, s.kv, cappedKey(s.created))
	}
	cancel()
	if err != nil {
		return 0, 0, s.broker(err, "open its readers' bucket %s", ReadersBucket(s.name))
	}
	s.prev, s.front, s.floor = 0, false, 0
	rewound := pos == nil && from != nil
	if rewound {
		pos = from
	}
	if pos == nil {
		// No position: the stream is read from the first message it holds. What it no longer holds
		// is then seen on each run's own seqs: a run whose first line held is not its next is
		// quarantined.
		return 0, st.LastSeq, nil
	}
	p, err := ParseStreamPosition(pos)
	if err != nil {
		return 0, 0, fmt.Errorf("%w (the position stored for stream %q)", err, s.name)
	}
	// Everything of the filter up to top was applied: the position, or the floor it reads again below.
	top := max(p.Seq, p.Floor)
	switch {
	case !p.Created.Equal(info.Created):
		if !s.cfg.acceptGap {
			return 0, 0, s.gapError(ctx, top, st.FirstSeq, true)
		}
		s.b.Logger.Warn("jetstream: retention gap accepted: the stream was created again; reading it from its start",
			"stream", s.name, "filter", s.filter, "position", top)
		return 0, st.LastSeq, nil
	case top > st.LastSeq:
		// The stream holds fewer messages than were read: it lost its last ones (one replica's power
		// failure without sync always) and gives their sequences to the next messages, which may
		// already be there, below the position. Which are new cannot be told by their sequences:
		// the stream is read again from its start, what was applied coming back as duplicates.
		s.b.Logger.Warn("jetstream: the stream ends before the stored position; reading it again from its start",
			"stream", s.name, "position", top, "last_seq", st.LastSeq)
		return 0, st.LastSeq, nil
	case s.capped > top+1 && !s.cfg.acceptGap:
		// The hard cap removed the filter's messages after the position; the stream's first
		// sequence may still be below its mark (a message outside the filter, or the cap stopped
		// between its mark and its removal): a gap, whatever the first sequence.
		return 0, 0, s.capGap(s.gapError(ctx, top, max(s.capped, st.FirstSeq), false), s.capped)
	case st.FirstSeq > top+1:
		if !s.cfg.acceptGap {
			return 0, 0, s.gapError(ctx, top, st.FirstSeq, false)
		}
		s.acceptedGap(top, st.FirstSeq)
		s.prev, s.front = st.FirstSeq-1, true
		return st.FirstSeq, st.LastSeq, nil
	case rewound:
		// Read again from the first message held, the position rewound from kept as the floor.
		s.front, s.floor = true, top
		return 0, st.LastSeq, nil
	}
	s.prev, s.front, s.floor = p.Seq, true, p.Floor
	return p.Seq + 1, st.LastSeq, nil
}

// checkFront reports a retention gap when the stream's first sequence now is past what was read
// (through before, or the floor): messages after it were removed before they were read.
func (s *streamSource) checkFront(ctx context.Context, before uint64) error {
	rctx, cancel := s.request(ctx)
	info, err := s.stream.Info(rctx)
	cancel()
	if err != nil {
		return s.broker(err, "read its first sequence")
	}
	read := max(before, s.floor)
	first, capped := info.State.FirstSeq, uint64(0)
	if s.kv != nil {
		rctx, cancel := s.request(ctx)
		var err error
		capped, err = uintValue(rctx, s.kv, cappedKey(s.created))
		cancel()
		if err != nil {
			return s.broker(err, "read the capped mark of %s", ReadersBucket(s.name))
		}
		first = max(first, capped)
	}
	if first > read+1 {
		if !s.cfg.acceptGap {
			return s.capGap(s.gapError(ctx, read, first, false), capped)
		}
		s.acceptedGap(read, first)
	}
	return nil
}

// capGap marks a retention gap as the cap's when the cap's mark is what it reached to.
func (s *streamSource) capGap(err error, capped uint64) error {
	if e, ok := err.(*RetentionGapError); ok && capped > 0 && e.FirstSeq == capped {
		e.Capped = true
	}
	return err
}

func (s *streamSource) acceptedGap(pos, first uint64) {
	s.b.Logger.Warn("jetstream: retention gap accepted: reading on from the stream's first message",
		"stream", s.name, "filter", s.filter, "position", pos, "first_seq", first)
}

// batch is what one transaction applies: lines with their stream sequences and subjects.
type batch struct {
	lines    [][]byte
	seqs     []uint64
	subjects []string
	size     int
	hole     int // the index of the first line after a hole in stream sequences; -1: none
}

// fill reads the next batch: up to the inbox's bounds, or fewer when the consumer holds no more
// (its last message's pending count is 0) or, for ApplyStream, at the target. done says the session
// has read all it is to read.
func (s *streamSource) fill(ctx context.Context, c *consumer, follow bool) (b *batch, done bool, err error) {
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
			if moved, err := s.moved(ctx); err != nil || moved {
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

// moved reports whether the stored position is no longer the one this call stored (a Release).
func (s *streamSource) moved(ctx context.Context) (bool, error) {
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
		if err := s.check(b.subjects[i], b.seqs[i], b.lines[i]); err != nil {
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

// advance stores the target as the position once everything of the filter up to it is applied, so
// that a position read through a filter keeps up with the stream's other subjects; then a later
// removal of their messages is not taken for a gap.
func (s *streamSource) advance(ctx context.Context) error {
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

// check refuses a message that is not one journal line of its subject's run: the sink never
// publishes one, and the inbox never skips what it cannot attribute.
func (s *streamSource) check(subject string, seq uint64, line []byte) error {
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

// gapError is the retention gap after pos, naming the runs it may have taken whole.
func (s *streamSource) gapError(ctx context.Context, pos, first uint64, recreated bool) error {
	e := &RetentionGapError{Stream: s.name, Filter: s.filter, Position: pos, FirstSeq: first, Recreated: recreated}
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.filter))
	if err != nil {
		return e // the gap is certain; the names are what could be found
	}
	held := info.State.Subjects
	for r, err := range s.in.AllRuns(ctx) {
		if err != nil {
			break
		}
		if held[s.cfg.prefix+"."+Token(r.RunID)] > 0 {
			continue
		}
		if len(e.RunsGone) < MaxRunsNamed {
			e.RunsGone = append(e.RunsGone, r.RunID)
		} else {
			e.RunsGoneMore++
		}
	}
	return e
}
