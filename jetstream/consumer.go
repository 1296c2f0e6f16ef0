// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// consumer is one ordered consumer, and the messages it delivered that are still to be read.
type consumer struct {
	cons    jetstream.Consumer
	cc      jetstream.ConsumeContext
	msgs    chan jetstream.Msg
	errs    chan error
	pending uint64        // messages of the filter from the start when it was created
	heldMsg jetstream.Msg // read, but past the bounds of the batch it was read for

	// The bytes waiting in msgs are bounded too, not only their number: a batch of lines as long
	// as the line limit would otherwise wait whole beside the one being applied. And messages enter
	// msgs in stream order even when the ordered consumer resets while one waits for room: the
	// new consumer's first message, delivered by another goroutine, must not pass the old one's
	// last, or a batch could commit past a message that comes after it.
	mu       sync.Mutex
	room     *sync.Cond
	count    int      // messages in msgs
	queued   int      // their bytes
	waiting  []uint64 // stream sequences of the messages waiting for room
	maxBytes int
	closed   bool
}

// admit queues m in msgs once it fits (in number and bytes; one message always fits an empty
// queue, whatever its size) and no message with a lower stream sequence is waiting; false once the
// consumer is stopped. msgs never blocks: its room is checked under the lock.
func (c *consumer) admit(m jetstream.Msg) bool {
	var seq uint64
	if meta, err := m.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	size := len(m.Data())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting = append(c.waiting, seq)
	for !c.closed && (c.count >= cap(c.msgs) || (c.count > 0 && c.queued+size > c.maxBytes) || c.lowerWaiting(seq)) {
		c.room.Wait()
	}
	c.waiting = slices.DeleteFunc(c.waiting, func(w uint64) bool { return w == seq })
	c.room.Broadcast()
	if c.closed {
		return false
	}
	c.count++
	c.queued += size
	c.msgs <- m
	return true
}

func (c *consumer) lowerWaiting(seq uint64) bool {
	return slices.ContainsFunc(c.waiting, func(w uint64) bool { return w < seq })
}

// taken frees the room of a message read from msgs.
func (c *consumer) taken(m jetstream.Msg) jetstream.Msg {
	c.mu.Lock()
	c.count--
	c.queued -= len(m.Data())
	c.room.Broadcast()
	c.mu.Unlock()
	return m
}

// consume creates an ordered consumer from start (0: the first message): acknowledgements none,
// memory storage, nothing durable on the server. What it delivers waits in a channel of one batch;
// while the batch before is applied, the consumer's pull requests (one batch of messages, and of
// bytes at least the connection's max payload, so that any message fits) bound what else the
// connection holds. Its own resets (a missed heartbeat, a dropped message) resume after the last
// message it delivered; any error it cannot get past by itself ends the session, and the next one
// starts from the position stored.
func (s *streamSource) consume(ctx context.Context, start uint64) (*consumer, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.filter}, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxResetAttempts: 1}
	if start > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, s.broker(err, "create an ordered consumer from sequence %d", start)
	}
	c := &consumer{cons: cons, msgs: make(chan jetstream.Msg, s.b.Lines), errs: make(chan error, 1),
		maxBytes: s.b.Bytes}
	c.room = sync.NewCond(&c.mu)
	limit := max(s.b.Bytes, int(s.js.Conn().MaxPayload())) + 8<<10 // room for a message's subject and headers
	onError := jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
			return // the ordered consumer resets itself after these; a reset that fails comes next
		}
		select {
		case c.errs <- err:
		default:
		}
	})
	c.cc, err = cons.Consume(func(m jetstream.Msg) { c.admit(m) }, jetstream.PullMaxMessagesWithBytesLimit(s.b.Lines, limit), onError)
	if err != nil {
		return nil, s.broker(err, "consume from sequence %d", start)
	}
	c.pending = 1 // unknown: read
	if info := cons.CachedInfo(); info != nil {
		c.pending = info.NumPending
	}
	return c, nil
}

// next returns the next message delivered, waiting up to wait (nats.ErrTimeout after it).
func (c *consumer) next(ctx context.Context, wait time.Duration) (jetstream.Msg, error) {
	if m := c.heldMsg; m != nil {
		c.heldMsg = nil
		return m, nil
	}
	select {
	case m := <-c.msgs:
		return c.taken(m), nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m := <-c.msgs:
		return c.taken(m), nil
	case err := <-c.errs:
		return nil, err
	case <-t.C:
		return nil, nats.ErrTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop ends the consumer and deletes it, so that nothing of the call is left on the server (it
// would otherwise go after its inactivity threshold).
func (c *consumer) stop(s *streamSource) {
	c.mu.Lock()
	c.closed = true
	c.room.Broadcast()
	c.mu.Unlock()
	c.cc.Stop()
	if !s.js.Conn().IsConnected() {
		return
	}
	if info := c.cons.CachedInfo(); info != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.stream.DeleteConsumer(ctx, info.Name)
	}
}
