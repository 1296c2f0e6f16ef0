// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"sync"

	"github.com/textmachine/outbox/outbox"
)

// hookedSink is a sink over another one whose calls a test steers: before, if set, runs before each
// call with the call's number (from 1) and may fail it; after, if set, runs after a call that went
// through.
type hookedSink struct {
	sink   outbox.Sink
	mu     sync.Mutex
	calls  int
	before func(call int, ctx context.Context, lines []outbox.EventLine) error
	after  func(call int)
}

func (h *hookedSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	h.mu.Lock()
	h.calls++
	call := h.calls
	h.mu.Unlock()
	if h.before != nil {
		if err := h.before(call, ctx, lines); err != nil {
			return err
		}
	}
	if err := h.sink.Append(ctx, runID, lines); err != nil {
		return err
	}
	if h.after != nil {
		h.after(call)
	}
	return nil
}

type sinkFunc func(ctx context.Context, runID string, lines []outbox.EventLine) error

func (f sinkFunc) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	return f(ctx, runID, lines)
}
