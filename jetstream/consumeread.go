// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
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
	b      inboxseam.Bounds

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
	// fresh says the session reads from the stream's first message, having nothing to read on
	// after (no position, or a retention gap accepted): where that is is settled after the reader
	// registered.
	fresh bool

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
		return s.advanceToTarget(ctx)
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
		return s.advanceToTarget(ctx)
	}
	for {
		b, done, err := s.readBatch(ctx, c, follow)
		if err != nil {
			return err
		}
		if err := s.commitBatch(ctx, b); err != nil {
			return err
		}
		if done {
			return s.advanceToTarget(ctx)
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
	if err := s.registerAt(ctx, max(start, 1)-1); err != nil {
		return 0, 0, err
	}
	if s.fresh {
		if start, err = s.settle(ctx, start); err != nil {
			return 0, 0, err
		}
	}
	return start, last, nil
}

// registerAt registers seq as the reader's position; a failure stops the session before it reads.
func (s *streamSource) registerAt(ctx context.Context, seq uint64) error {
	if err := s.register(ctx, seq); errors.Is(err, ErrReaderNameShared) {
		return err
	} else if err != nil {
		return s.broker(err, "register reader %q in %s before reading", s.in.ReaderName(), ReadersBucket(s.name))
	}
	return nil
}

// settle says where a session that reads from the stream's first message starts, once the reader
// is registered at a mark below it (start, the first sequence begin saw, less one). The order is
// what protects it: a trim that looks at the readers after the key was written keeps everything
// above the mark; one that looked before had announced what it removes (trimmingKey) before its
// last look, and that announcement is read here, after the key was written, with the stream's
// first sequence. Reading from the higher of them, the reader never begins below what a trim that
// did not see it removes: reading the first sequence before registering, or without the
// announcement, would let such a trim take what the reader had just begun to read, and the hole
// would stop it with a retention gap. The key is raised to just below where it starts.
func (s *streamSource) settle(ctx context.Context, start uint64) (uint64, error) {
	rctx, cancel := s.request(ctx)
	defer cancel()
	announced, err := uintValue(rctx, s.kv, trimmingKey(s.created, s.cfg.prefix))
	if err != nil {
		return 0, s.broker(err, "read what its trims remove in %s", ReadersBucket(s.name))
	}
	info, err := s.stream.Info(rctx)
	if err != nil {
		return 0, s.broker(err, "read its first sequence")
	}
	first := min(max(start, info.State.FirstSeq, announced), info.State.LastSeq+1)
	if first <= max(start, 1) {
		return start, nil
	}
	if err := s.registerAt(ctx, first-1); err != nil {
		return 0, err
	}
	if s.front {
		s.prev = first - 1 // a retention gap accepted: read on from there
	}
	return first, nil
}
