// SPDX-License-Identifier: Apache-2.0

package otel_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/otel"
	"github.com/textmachine/outbox/outbox"
)

const run = "run-1"

// tracing is an SDK tracer provider that keeps every ended span in memory.
func tracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

// produce is an engine that projects to sink: a handshake without a trace, then an order placed
// inside the span "place order", whose span context it returns.
func produce(t *testing.T, tp trace.TracerProvider, sink outbox.Sink) trace.SpanContext {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	relay, err := outbox.NewRelay(s, sink, run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("engine").Start(ctx, "place order")
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := s.EnqueueTx(ctx, tx, run, journal.Builder(run, "order_placed", map[string]int{"cents": 250}, otel.WithTrace(ctx)))
		return err
	})
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return span.SpanContext()
}

// platform opens an inbox whose handlers get spans from tp, and a handler that records the span
// context each event's handler was given.
func platform(t *testing.T, tp trace.TracerProvider) (*inbox.Inbox, inbox.Handler, map[int64]trace.SpanContext) {
	t.Helper()
	in, err := inbox.Open(context.Background(), filepath.Join(t.TempDir(), "platform.db"), otel.WithHandlerContext(otel.WithTracerProvider(tp)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	seen := map[int64]trace.SpanContext{}
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		seen[ev.Seq] = trace.SpanContextFromContext(ctx)
		return nil
	}
	return in, h, seen
}

// checkLinked checks that the platform's span for the order is named by its type, linked to the
// engine's span and not its child, and is the span the handler was given; and that the handshake's
// span has no link.
func checkLinked(t *testing.T, exp *tracetest.InMemoryExporter, engine trace.SpanContext, seen map[int64]trace.SpanContext) {
	t.Helper()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	order, ok := byName["order_placed"]
	if !ok {
		t.Fatalf("no span order_placed among %v", exp.GetSpans())
	}
	if len(order.Links) != 1 || !order.Links[0].SpanContext.Equal(engine.WithRemote(true)) {
		t.Errorf("order_placed links %+v, want one to the engine's span %v", order.Links, engine)
	}
	if order.Parent.SpanID() == engine.SpanID() || order.SpanContext.TraceID() == engine.TraceID() {
		t.Errorf("order_placed is in the engine's trace (parent %v): a link, not a parent, was wanted", order.Parent)
	}
	if order.SpanKind != trace.SpanKindConsumer {
		t.Errorf("order_placed is of kind %v", order.SpanKind)
	}
	if !seen[2].Equal(order.SpanContext) {
		t.Errorf("the handler was given span %v, the span is %v", seen[2], order.SpanContext)
	}
	started, ok := byName["run_started"]
	if !ok || len(started.Links) != 0 {
		t.Errorf("run_started: %v, %+v, want a span without a link", ok, started.Links)
	}
}

func TestAnEngineSpanReachesTheInboxAsALinkedSpanThroughTheFile(t *testing.T) {
	tp, exp := tracing(t)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	engine := produce(t, tp, j)
	j.Close()
	in, h, seen := platform(t, tp)
	rep, err := in.ApplyFile(context.Background(), path, h)
	if err != nil || rep.Applied != 2 {
		t.Fatalf("%+v, %v", rep, err)
	}
	checkLinked(t, exp, engine, seen)
}

func TestAnEngineSpanReachesTheInboxAsALinkedSpanThroughTheStream(t *testing.T) {
	ctx := context.Background()
	tp, exp := tracing(t)
	js := startNATS(t)
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS"); err != nil {
		t.Fatal(err)
	}
	sink, err := jetstream.NewSink(js, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	engine := produce(t, tp, sink)
	msg, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := msg.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Header.Get(jetstream.TraceparentHeader), otel.Inject(trace.ContextWithSpanContext(ctx, engine)).Traceparent; got != want || got == "" {
		t.Errorf("the message's traceparent is %q, want %q", got, want)
	}
	in, h, seen := platform(t, tp)
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, h)
	if err != nil || rep.Applied != 2 {
		t.Fatalf("%+v, %v", rep, err)
	}
	checkLinked(t, exp, engine, seen)
}

func TestInjectAndExtractCarryTheSpanContextWithItsTracestate(t *testing.T) {
	if tc := otel.Inject(context.Background()); !tc.IsZero() {
		t.Fatalf("no span: %+v", tc)
	}
	ts, err := trace.ParseTraceState("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	tc := otel.Inject(trace.ContextWithSpanContext(context.Background(), sc))
	want := journal.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}
	if tc != want {
		t.Fatalf("Inject = %+v, want %+v", tc, want)
	}
	if got := otel.Extract(tc); !got.Equal(sc.WithRemote(true)) {
		t.Errorf("Extract = %v, want %v", got, sc)
	}
	if got := otel.Extract(journal.TraceContext{Traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}); got.IsValid() {
		t.Errorf("Extract of upper-case hex = %v, want invalid", got)
	}
}

func TestAHostileTraceMemberGivesAnUnlinkedSpanAndTheLineIsApplied(t *testing.T) {
	tp, exp := tracing(t)
	in, h, _ := platform(t, tp)
	ls := [][]byte{
		[]byte(`{"engine_run_id":"r","seq":1,"type":"a","trace":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx: y"}}`),
		[]byte(`{"engine_run_id":"r","seq":2,"type":7,"trace":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`),
		fmt.Appendf(nil, `{"engine_run_id":"r","seq":3,"type":"x%s"}`, strings.Repeat("é", 100)),
	}
	rep, err := in.Apply(context.Background(), ls, h)
	if err != nil || rep.Applied != 3 {
		t.Fatalf("%+v, %v", rep, err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []string{"a", otel.DefaultSpanName, "x" + strings.Repeat("é", 63)} {
		if spans[i].Name != want || len(spans[i].Links) != 0 {
			t.Errorf("span %d: %q with links %+v, want %q without", i, spans[i].Name, spans[i].Links, want)
		}
	}
}

func TestAHandlersErrorIsTheStatusOfItsSpan(t *testing.T) {
	tp, exp := tracing(t)
	in, err := inbox.Open(context.Background(), filepath.Join(t.TempDir(), "platform.db"), otel.WithHandlerContext(otel.WithTracerProvider(tp)))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	rep, err := in.Apply(context.Background(), [][]byte{[]byte(`{"engine_run_id":"r","seq":1,"type":"a"}`)},
		func(context.Context, *sql.Tx, inbox.Event) error {
			return fmt.Errorf("not ours: %w", inbox.ErrQuarantine)
		})
	if err != nil || rep.Quarantined != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code.String() != "Error" {
		t.Fatalf("spans %+v", spans)
	}
}

// startNATS starts an in-process JetStream server on a loopback port, its store in a temporary
// directory, and returns a JetStream context on a connection to it.
func startNATS(t *testing.T) njs.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
