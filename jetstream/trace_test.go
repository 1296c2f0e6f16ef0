// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestTheSinkSetsALinesTraceContextAsTraceparentAndTracestateHeaders(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		traced, err := journal.Builder("a", "x", 1, journal.WithTraceContext(journal.TraceContext{Traceparent: parent, Tracestate: "congo=t61"}))(1)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := journal.Builder("a", "x", 2)(2)
		if err != nil {
			t.Fatal(err)
		}
		// A producer's malformed trace member costs the headers, not the line.
		bad := fmt.Appendf(nil, `{"engine_run_id":"a","seq":3,"trace":{"traceparent":"%s\r\nNats-Msg-Id: x"}}`, parent)
		if err := s.Append(ctx, "a", []outbox.EventLine{{Seq: 1, Line: traced}, {Seq: 2, Line: plain}, {Seq: 3, Line: bad}}); err != nil {
			t.Fatal(err)
		}
		str, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		want := []struct{ parent, state string }{{parent, "congo=t61"}, {}, {}}
		for i, w := range want {
			msg, err := str.GetMsg(ctx, uint64(i+1))
			if err != nil {
				t.Fatal(err)
			}
			if got := msg.Header.Get(jetstream.TraceparentHeader); got != w.parent {
				t.Errorf("seq %d: traceparent %q, want %q", i+1, got, w.parent)
			}
			if got := msg.Header.Get(jetstream.TracestateHeader); got != w.state {
				t.Errorf("seq %d: tracestate %q, want %q", i+1, got, w.state)
			}
			if got := msg.Header.Get(njs.MsgIDHeader); got != jetstream.MsgID("a", int64(i+1)) {
				t.Errorf("seq %d: Msg-Id %q", i+1, got)
			}
		}
		if rep := verify(t, js); rep.Lines != 3 {
			t.Errorf("verify: %+v", rep)
		}
	})
}
