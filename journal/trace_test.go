// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

const (
	goodParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	goodState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

func TestABuilderWithoutATraceContextWritesTheLineItAlwaysDid(t *testing.T) {
	want := regexp.MustCompile(`^\{"engine_run_id":"r","seq":3,"type":"order_placed","at":"[0-9T:.Z-]{30}","data":\{"n":1\}\}$`)
	for name, build := range map[string]outbox.EventBuilder{
		"no option":   journal.Builder("r", "order_placed", map[string]int{"n": 1}),
		"zero option": journal.Builder("r", "order_placed", map[string]int{"n": 1}, journal.WithTraceContext(journal.TraceContext{})),
		"nil option":  journal.Builder("r", "order_placed", map[string]int{"n": 1}, nil),
	} {
		line, err := build(3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !want.Match(line) {
			t.Errorf("%s: %s, want the line without a trace member", name, line)
		}
	}
}

func TestABuilderWritesTheTraceContextIntoTheLineAndTheLineStaysAJournalLine(t *testing.T) {
	tc := journal.TraceContext{Traceparent: goodParent, Tracestate: goodState}
	line, err := journal.Builder("r", "order_placed", map[string]int{"n": 1}, journal.WithTraceContext(tc))(1)
	if err != nil {
		t.Fatal(err)
	}
	want := `,"trace":{"traceparent":"` + goodParent + `","tracestate":"` + goodState + `"},"data":{"n":1}}`
	if !bytes.HasSuffix(line, []byte(want)) {
		t.Fatalf("%s, want it to end with %s", line, want)
	}
	got, err := journal.LineTraceContext(line)
	if err != nil || got != tc {
		t.Fatalf("LineTraceContext = %+v, %v, want %+v", got, err, tc)
	}
	if err := journal.CheckLine("r", 1, line); err != nil {
		t.Fatalf("CheckLine: %v", err)
	}
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	line2, err := journal.Builder("r", "order_placed", nil, journal.WithTraceContext(journal.TraceContext{Traceparent: goodParent}))(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), "r", []outbox.EventLine{{Seq: 1, Line: line}, {Seq: 2, Line: line2}}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	rep, err := journal.Verify(strings.NewReader(string(line) + "\n" + string(line2) + "\n"))
	if err != nil || rep.Lines != 2 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestABuilderGivenAMalformedTraceContextFailsTheEnqueue(t *testing.T) {
	for _, tc := range []journal.TraceContext{
		{Traceparent: strings.ToUpper(goodParent)},
		{Tracestate: goodState},
		{Traceparent: goodParent, Tracestate: "Bad=1"},
	} {
		line, err := journal.Builder("r", "t", nil, journal.WithTraceContext(tc))(1)
		if !errors.Is(err, journal.ErrTraceContext) || line != nil {
			t.Errorf("%+v: %s, %v, want no line and ErrTraceContext", tc, line, err)
		}
	}
}

func TestATraceContextIsValidOnlyInTheW3CForm(t *testing.T) {
	good := []journal.TraceContext{
		{},
		{Traceparent: goodParent},
		{Traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{Traceparent: goodParent, Tracestate: goodState},
		{Traceparent: goodParent, Tracestate: "a=1 , ,b@c=x y"},
		{Traceparent: goodParent, Tracestate: "t1@sys=" + strings.Repeat("v", 256)},
	}
	for _, tc := range good {
		if err := tc.Validate(); err != nil {
			t.Errorf("%+v: %v", tc, err)
		}
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = string(rune('a'+i%26)) + strings.Repeat("x", i/26) + "=1"
	}
	bad := []journal.TraceContext{
		{Tracestate: "a=1"},
		{Traceparent: goodParent[:54]},
		{Traceparent: goodParent + "-"},
		{Traceparent: strings.ToUpper(goodParent)},
		{Traceparent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		{Traceparent: "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"},
		{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n"},
		{Traceparent: goodParent, Tracestate: " a=1"},
		{Traceparent: goodParent, Tracestate: "a=1\r\nx=2"},
		{Traceparent: goodParent, Tracestate: "A=1"},
		{Traceparent: goodParent, Tracestate: "a=1,a=2"},
		{Traceparent: goodParent, Tracestate: "a"},
		{Traceparent: goodParent, Tracestate: "a=1=2"},
		{Traceparent: goodParent, Tracestate: "a="},
		{Traceparent: goodParent, Tracestate: "a=é"},
		{Traceparent: goodParent, Tracestate: "a=" + strings.Repeat("v", 257)},
		{Traceparent: goodParent, Tracestate: strings.Repeat("a=1,", 128) + "b=1"},
		{Traceparent: goodParent, Tracestate: strings.Join(many, ",")},
	}
	for _, tc := range bad {
		if err := tc.Validate(); !errors.Is(err, journal.ErrTraceContext) {
			t.Errorf("%q: %v, want ErrTraceContext", tc, err)
		}
	}
}

func TestAMalformedTraceMemberIsReportedAndTheLineStaysAJournalLine(t *testing.T) {
	const head = `{"engine_run_id":"r","seq":1,"type":"t"`
	good := `{"traceparent":"` + goodParent + `"}`
	for _, member := range []string{
		`,"trace":"` + goodParent + `"`,
		`,"trace":null`,
		`,"trace":{}`,
		`,"trace":{"traceparent":1}`,
		`,"trace":{"traceparent":"` + strings.ToUpper(goodParent) + `"}`,
		`,"trace":{"traceparent":"` + goodParent + `","traceparent":"` + goodParent + `"}`,
		`,"trace":{"traceparent":"` + goodParent + `","TraceParent":"` + goodParent + `"}`,
		`,"trace":{"traceparent":"` + goodParent + `","tracestate":7}`,
		`,"trace":{"traceparent":"` + goodParent + `","tracestate":"a=1\r\nb=2"}`,
		`,"trace":` + good + `,"trace":` + good,
		`,"trace":` + good + `,"Trace":` + good,
		`,"TRACE":` + good,
	} {
		line := []byte(head + member + `}`)
		if tc, err := journal.LineTraceContext(line); !errors.Is(err, journal.ErrTraceContext) || !tc.IsZero() {
			t.Errorf("%s: %+v, %v, want ErrTraceContext", line, tc, err)
		}
		if err := journal.CheckLine("r", 1, line); err != nil {
			t.Errorf("%s: CheckLine: %v", line, err)
		}
	}
	for line, want := range map[string]journal.TraceContext{
		head + `}`:                           {},
		head + `,"data":{"trace":1}}`:        {},
		head + `,"tracer":1}`:                {},
		head + `,"trace":` + good + `}`:      {Traceparent: goodParent},
		head + `,"tr\u0061ce":` + good + `}`: {Traceparent: goodParent},
		head + `,"trace":{"tracestate":"a=1","x":[1],"traceparent":"` + goodParent + `"}}`: {Traceparent: goodParent, Tracestate: "a=1"},
	} {
		if tc, err := journal.LineTraceContext([]byte(line)); err != nil || tc != want {
			t.Errorf("%s: %+v, %v, want %+v", line, tc, err, want)
		}
	}
}

// FuzzLineTraceContext: whatever a line holds, reading its trace member ends without a panic, and
// what it returns is either an error or a trace context that validates.
func FuzzLineTraceContext(f *testing.F) {
	f.Add([]byte(`{"engine_run_id":"r","seq":1,"trace":{"traceparent":"` + goodParent + `","tracestate":"` + goodState + `"}}`))
	f.Add([]byte(`{"engine_run_id":"r","seq":1,"tr\u0061ce":{"traceparent":"` + goodParent + `"},"TRACE":1}`))
	f.Add([]byte(`{"trace":{"traceparent":"` + goodParent + `","traceparent":""}}`))
	f.Add([]byte(`{"trace":[[[[{"traceparent":"x"}]]]]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		tc, err := journal.LineTraceContext(line)
		switch {
		case err != nil && !errors.Is(err, journal.ErrTraceContext):
			t.Fatalf("%v does not wrap ErrTraceContext", err)
		case err != nil && !tc.IsZero():
			t.Fatalf("%+v beside %v", tc, err)
		case err == nil && tc.Validate() != nil:
			t.Fatalf("%+v does not validate: %v", tc, tc.Validate())
		}
	})
}
