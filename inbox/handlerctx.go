// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"

	"github.com/textmachine/outbox/journal"
)

// HandlerContextFunc derives the context a handler is given for ev from ctx, the one the inbox would
// give it, and returns a function the inbox calls with the handler's result once the handler has
// returned (ErrHandlerPanicked when it panicked instead), or nil. It is where a tracer starts a
// span per line and ends it: package github.com/textmachine/outbox/otel gives one that starts a span
// linked to the producer's (Event.TraceContext).
//
// It runs inside the inbox's transaction, before the handler, for the lines whose handler runs, and
// must neither block nor call the inbox. The context it returns must be derived from ctx (a nil one
// stands for ctx): it carries ctx's cancellation and the mark that refuses a handler's calls back
// into the inbox (ErrInHandler), which the inbox puts back if it is missing.
type HandlerContextFunc func(ctx context.Context, ev Event) (context.Context, func(error))

// ErrHandlerPanicked is what a HandlerContextFunc's end function is given when the handler panicked;
// the panic itself goes on to the caller as before.
var ErrHandlerPanicked = errors.New("inbox: the handler panicked")

// WithHandlerContext has f derive each handler's context (see HandlerContextFunc). Without it, or with
// nil, a handler is given the inbox's context as it is.
func WithHandlerContext(f HandlerContextFunc) Option {
	return func(c *config) error {
		c.handlerCtx = f
		return nil
	}
}

// TraceContext returns the W3C trace context the event's line carries (its "trace" member, written by
// journal.WithTraceContext), checked: the zero TraceContext when the line has none, and when its
// member is malformed, so that a producer's bad trace context costs the trace and never the line.
func (e Event) TraceContext() journal.TraceContext {
	tc, err := journal.LineTraceContext(e.Line)
	if err != nil {
		return journal.TraceContext{}
	}
	return tc
}

// callHandler runs h for ev with the context the inbox's HandlerContextFunc derives, if any.
func (t *txn) callHandler(hctx context.Context, h Handler, ev Event) error {
	derive := t.in.cfg.handlerCtx
	if derive == nil {
		return h(hctx, t.tx, ev)
	}
	ctx, end := derive(hctx, ev)
	if ctx == nil {
		ctx = hctx
	} else if !t.in.wr.Marked(ctx) {
		ctx = t.in.wr.Mark(ctx)
	}
	if end == nil {
		return h(ctx, t.tx, ev)
	}
	returned := false
	defer func() {
		if !returned {
			end(ErrHandlerPanicked)
		}
	}()
	err := h(ctx, t.tx, ev)
	returned = true
	end(err)
	return err
}
