// SPDX-License-Identifier: Apache-2.0

package otel

import (
	"context"
	"encoding/json"
	"unicode/utf8"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// ScopeName is the instrumentation scope of the spans the package starts.
const ScopeName = "github.com/textmachine/outbox/otel"

// DefaultSpanName names a handler's span when its line has no "type" string.
const DefaultSpanName = "outbox event"

// maxSpanName bounds a span name taken from a line: the type is the producer's, and a tracing backend
// indexes names.
const maxSpanName = 128

var propagator = propagation.TraceContext{}

// Inject returns the W3C trace context of the span in ctx: the zero TraceContext when ctx holds no
// valid span context.
func Inject(ctx context.Context) journal.TraceContext {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	tc := journal.TraceContext{Traceparent: c["traceparent"], Tracestate: c["tracestate"]}
	if tc.Validate() != nil {
		// The propagator writes the W3C form; a tracestate past the line's limit is dropped rather
		// than failing the enqueue.
		tc.Tracestate = ""
		if tc.Validate() != nil {
			return journal.TraceContext{}
		}
	}
	return tc
}

// WithTrace is the journal.Builder option that writes the trace context of ctx's span into the line
// (journal.WithTraceContext(Inject(ctx))); with no span in ctx it writes nothing.
func WithTrace(ctx context.Context) journal.BuilderOption {
	return journal.WithTraceContext(Inject(ctx))
}

// Extract returns the remote span context tc describes: invalid (trace.SpanContext.IsValid is false)
// for the zero TraceContext and a malformed one.
func Extract(tc journal.TraceContext) trace.SpanContext {
	if tc.IsZero() || tc.Validate() != nil {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": tc.Traceparent, "tracestate": tc.Tracestate})
	return trace.SpanContextFromContext(ctx)
}

// Option configures HandlerContext and WithHandlerContext.
type Option func(*config)

type config struct {
	provider trace.TracerProvider
}

// WithTracerProvider sets the provider of the handler's spans (OpenTelemetry's global one by
// default, as it is when the handler runs).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.provider = tp }
}

// HandlerContext returns the inbox.HandlerContextFunc that starts each handler's span: named by the
// line's "type" (DefaultSpanName without one), of kind consumer, a child of whatever span the inbox's
// context holds, linked to the producer's span when the line carries its trace context, with the
// line's run id and seq as attributes (outbox.engine_run_id, outbox.seq). The span ends when the
// handler returns; a handler error (inbox.ErrQuarantine included) or panic sets its status to Error.
func HandlerContext(opts ...Option) inbox.HandlerContextFunc {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		tp := c.provider
		if tp == nil {
			tp = gotel.GetTracerProvider()
		}
		start := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("outbox.engine_run_id", ev.RunID),
				attribute.Int64("outbox.seq", ev.Seq),
			),
		}
		if sc := Extract(ev.TraceContext()); sc.IsValid() {
			start = append(start, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		ctx, span := tp.Tracer(ScopeName).Start(ctx, spanName(ev.Line), start...)
		return ctx, func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}

// WithHandlerContext is the inbox option of HandlerContext: inbox.WithHandlerContext(HandlerContext(opts...)).
func WithHandlerContext(opts ...Option) inbox.Option {
	return inbox.WithHandlerContext(HandlerContext(opts...))
}

// spanName is the line's "type", cut to maxSpanName bytes at a character boundary, or
// DefaultSpanName.
func spanName(line []byte) string {
	var l struct {
		Type *string `json:"type"`
	}
	if json.Unmarshal(line, &l) != nil || l.Type == nil || *l.Type == "" || !utf8.ValidString(*l.Type) {
		return DefaultSpanName
	}
	name := *l.Type
	if len(name) > maxSpanName {
		cut := maxSpanName
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut]
	}
	return name
}
