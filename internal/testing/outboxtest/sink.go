// SPDX-License-Identifier: Apache-2.0

package outboxtest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// ErrSinkDown is what a MemSink returns while it is failing.
var ErrSinkDown = errors.New("sink down")

// MemSink is a sink that keeps every batch it accepts in memory, and fails with ErrSinkDown while
// told to. It is safe for concurrent use.
type MemSink struct {
	mu      sync.Mutex
	batches [][]outbox.EventLine
	tried   []int // size of every batch offered, accepted or not
	failing bool
	got     chan struct{}
}

// NewMemSink returns an empty MemSink that accepts batches.
func NewMemSink() *MemSink { return &MemSink{got: make(chan struct{}, 1000)} }

// Append keeps a copy of lines, or fails with ErrSinkDown while the sink is failing.
func (m *MemSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tried = append(m.tried, len(lines))
	if m.failing {
		return ErrSinkDown
	}
	cp := make([]outbox.EventLine, len(lines))
	for i, l := range lines {
		cp[i] = outbox.EventLine{Seq: l.Seq, Line: bytes.Clone(l.Line)}
	}
	m.batches = append(m.batches, cp)
	select {
	case m.got <- struct{}{}:
	default:
	}
	return nil
}

// SetFailing makes every later Append fail (true) or succeed (false).
func (m *MemSink) SetFailing(v bool) { m.mu.Lock(); m.failing = v; m.mu.Unlock() }

// All is every line accepted, in the order of the batches.
func (m *MemSink) All() []outbox.EventLine {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []outbox.EventLine
	for _, b := range m.batches {
		out = append(out, b...)
	}
	return out
}

// Tried is the size of every batch offered, accepted or not, in order.
func (m *MemSink) Tried() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.tried)
}

// Got receives after a batch is accepted (at most 1,000 signals are kept unread), so that a test
// waits for the relay without polling.
func (m *MemSink) Got() <-chan struct{} { return m.got }

// FastRelay is a relay whose retries wait 1 to 5 ms instead of the default backoff, so that a test of
// a failing sink finishes at once.
func FastRelay(t testing.TB, s *outbox.Store, sink outbox.Sink, run string, opts ...outbox.RelayOption) *outbox.Relay {
	t.Helper()
	return NewRelay(t, s, sink, run, append([]outbox.RelayOption{outbox.WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)...)
}

// NewRelay is outbox.NewRelay for a test, which a construction error fails.
func NewRelay(t testing.TB, s *outbox.Store, sink outbox.Sink, run string, opts ...outbox.RelayOption) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(s, sink, run, opts...)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	return r
}
