// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

type ctxMark struct{}

func TestWithHandlerContextGivesTheHandlerTheDerivedContextAndTheHandlersResult(t *testing.T) {
	t.Parallel()
	type seen struct {
		tc     journal.TraceContext
		result error
	}
	var got []seen
	in, _ := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		i := len(got)
		got = append(got, seen{tc: ev.TraceContext()})
		return context.WithValue(ctx, ctxMark{}, ev.Seq), func(err error) { got[i].result = err }
	}))
	traced, err := journal.Builder("r", "t", nil, journal.WithTraceContext(journal.TraceContext{Traceparent: traceparent, Tracestate: "a=1"}))(1)
	if err != nil {
		t.Fatal(err)
	}
	quarantine := fmt.Errorf("not for us: %w", inbox.ErrQuarantine)
	rep, err := in.Apply(context.Background(), [][]byte{traced, line("r", 2), line("s", 1)},
		func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			if v := ctx.Value(ctxMark{}); v != ev.Seq {
				t.Errorf("run %s seq %d: the handler's context holds %v", ev.RunID, ev.Seq, v)
			}
			if ev.RunID == "s" {
				return quarantine
			}
			return insertHandler(ctx, tx, ev)
		})
	if err != nil || rep.Applied != 2 || rep.Quarantined != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	want := []seen{{tc: journal.TraceContext{Traceparent: traceparent, Tracestate: "a=1"}}, {}, {result: quarantine}}
	if len(got) != len(want) {
		t.Fatalf("the hook ran %d times, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].tc != want[i].tc || !errors.Is(got[i].result, want[i].result) || (want[i].result == nil) != (got[i].result == nil) {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestAMalformedTraceMemberNeitherStopsTheInboxNorReachesTheHook(t *testing.T) {
	t.Parallel()
	var tcs []journal.TraceContext
	in, _ := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		tcs = append(tcs, ev.TraceContext())
		return ctx, nil
	}))
	hostile := []string{
		`"x"`,
		`{"traceparent":"` + traceparent + `\r\nx"}`,
		`{"traceparent":"` + traceparent + `","traceparent":"` + traceparent + `"}`,
		`{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}`,
		`{"traceparent":"` + traceparent + `","tracestate":"a=` + strings.Repeat("v", 600) + `"}`,
		`["` + traceparent + `"]`,
	}
	var ls [][]byte
	for i, member := range hostile {
		ls = append(ls, fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"trace":%s}`, i+1, member))
	}
	ls = append(ls, fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"trace":{"traceparent":%q},"TRACE":{"traceparent":%q}}`, len(ls)+1, traceparent, traceparent))
	rep, err := in.Apply(context.Background(), ls, insertHandler)
	if err != nil || rep.Applied != len(ls) {
		t.Fatalf("%+v, %v, want every line applied", rep, err)
	}
	for i, tc := range tcs {
		if !tc.IsZero() {
			t.Errorf("line %d: the hook was given %+v", i+1, tc)
		}
	}
}

func TestAHandlerContextWithoutTheInboxsMarkStillRefusesTheHandlersCallsBack(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		return context.Background(), nil
	}))
	_, err := in.Apply(context.Background(), [][]byte{line("r", 1)}, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, err := in.Position(ctx, "r")
		return err
	})
	if !errors.Is(err, inbox.ErrInHandler) {
		t.Fatalf("%v, want ErrInHandler", err)
	}
}

func TestTheHandlerContextsEndIsToldOfAHandlersPanicAndThePanicGoesOn(t *testing.T) {
	t.Parallel()
	var ended error
	in, _ := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		return ctx, func(err error) { ended = err }
	}))
	defer func() {
		if v := recover(); v != "boom" {
			t.Fatalf("recovered %v, want the handler's panic", v)
		}
		if !errors.Is(ended, inbox.ErrHandlerPanicked) {
			t.Fatalf("end was given %v", ended)
		}
	}()
	in.Apply(context.Background(), [][]byte{line("r", 1)}, func(context.Context, *sql.Tx, inbox.Event) error { panic("boom") })
}

func TestAHandlerContextHookThatPanicsStoresNothingAndTheNextCallAppliesEachLineOnce(t *testing.T) {
	t.Parallel()
	boom := true
	in, path := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		if boom && ev.Seq == 2 {
			panic("hook")
		}
		return nil, nil
	}))
	ls := [][]byte{line("r", 1), line("r", 2)}
	func() {
		defer func() { recover() }()
		in.Apply(context.Background(), ls, insertHandler)
	}()
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows after the panic", n)
	}
	boom = false
	appliedExactlyOnce(t, in, path, ls)
}

func TestAHandlerGivenAContextNotDerivedFromTheInboxsStillCannotCallBackIntoIt(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		return context.Background(), nil
	}))
	var inner error
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		done := make(chan struct{})
		go func() { // another goroutine, with the context the handler was given
			defer close(done)
			_, inner = in.Apply(ctx, [][]byte{line("x", 1)}, insertNothing)
		}()
		<-done
		return insertHandler(ctx, tx, ev)
	}
	if _, err := in.Apply(context.Background(), [][]byte{line("r", 1)}, h); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, inbox.ErrCallInsideTx) {
		t.Errorf("a call with the handler's context from another goroutine: %v, want ErrCallInsideTx", inner)
	}
}
