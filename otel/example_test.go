// SPDX-License-Identifier: Apache-2.0

package otel_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/otel"
)

// The engine writes the trace context of its span into the line.
func ExampleWithTrace() {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("engine").Start(context.Background(), "place order")
	defer span.End()

	// In an engine: s.EnqueueTx(ctx, tx, runID, journal.Builder(runID, "order_placed", v, otel.WithTrace(ctx)))
	build := journal.Builder("run-1", "order_placed", map[string]int{"cents": 250}, otel.WithTrace(ctx))
	line, err := build(2)
	if err != nil {
		log.Fatal(err)
	}
	tc, err := journal.LineTraceContext(line)
	fmt.Println(tc.Traceparent == "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01", err)
	// Output: true <nil>
}

// The platform's handler runs inside a span named by the event's type and linked to the engine's.
func ExampleWithHandlerContext() {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(ctx)
	dir, _ := os.MkdirTemp("", "outbox-otel-example")
	defer os.RemoveAll(dir)

	// A line an engine wrote inside its span.
	ectx, engine := tp.Tracer("engine").Start(ctx, "place order")
	line, _ := journal.Builder("run-1", "order_placed", nil, otel.WithTrace(ectx))(1)
	engine.End()

	in, err := inbox.Open(ctx, filepath.Join(dir, "platform.db"), otel.WithHandlerContext(otel.WithTracerProvider(tp)))
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	_, err = in.Apply(ctx, [][]byte{line}, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		return nil // ctx holds the line's span: the handler's own spans are its children
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range exp.GetSpans() {
		if s.Name == "order_placed" {
			fmt.Println(s.Name, s.SpanKind, len(s.Links), s.Links[0].SpanContext.SpanID() == engine.SpanContext().SpanID())
		}
	}
	// Output: order_placed consumer 1 true
}
