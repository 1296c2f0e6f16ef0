// SPDX-License-Identifier: Apache-2.0

// Package otel carries OpenTelemetry trace context across the outbox's seam: from the engine's span,
// into the journal line, through a file or a JetStream stream, to a span of the platform's handler
// that is linked to it.
//
// It is a module of its own, so that the outbox's core modules (the library and the JetStream sink)
// take no OpenTelemetry dependency: without this package nothing changes, and a line is byte for byte
// what it was.
//
// On the engine's side, WithTrace is a journal.Builder option that writes the W3C trace context of
// the enqueue's context into the line's "trace" member (journal.TraceMember), with OpenTelemetry's
// W3C Trace Context propagator:
//
//	_, err := s.EnqueueTx(ctx, tx, runID, journal.Builder(runID, "order_placed", v, otel.WithTrace(ctx)))
//
// The JetStream sink copies that member into the traceparent and tracestate headers. On the
// platform's side, WithHandlerContext is an inbox option that gives each handler a context holding a
// new span, named by the event's type, of kind consumer, linked to the producer's span (a span link,
// not a parent: the line may be applied long after it was written, its handler may run more than
// once before one run commits, after an error or a crash, and its work belongs to the consumer's
// own trace), and ended with the handler's result:
//
//	in, err := inbox.Open(ctx, "platform.db", otel.WithHandlerContext())
//
// A line without a trace context, or with a malformed one (checked by journal.LineTraceContext: a
// producer cannot stop the platform with it), gets a span without a link.
//
// The tracer provider is OpenTelemetry's global one unless WithTracerProvider says otherwise; the
// propagator is always W3C Trace Context, the format the line carries, whatever the global propagator
// is.
package otel
