// SPDX-License-Identifier: Apache-2.0

package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
	"github.com/textmachine/outbox/outboxtest"
)

func jline(run string, seq int64, data string) outbox.EventLine {
	return outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"t","data":%q}`, run, seq, data)}
}

func batch(ls ...outbox.EventLine) []outbox.EventLine { return ls }

// sentinels are the errors a caller of a sink branches on.
var sentinels = []error{outbox.ErrSinkRefused, outbox.ErrInvalidLine, journal.ErrStreamGap, journal.ErrPayloadConflict, journal.ErrMalformed}

func kinds(err error) string {
	s := ""
	for _, e := range sentinels {
		if errors.Is(err, e) {
			s += "[" + e.Error() + "]"
		}
	}
	if err != nil && s == "" {
		return "other: " + err.Error()
	}
	return s
}

func TestTheSinkRefusesWhatTheJournalFileRefusesAndTakesWhatItTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type step struct {
		run   string
		lines []outbox.EventLine
	}
	cases := map[string][]step{
		"a run's lines in batches":      {{"r", batch(jline("r", 1, "a"), jline("r", 2, "b"))}, {"r", batch(jline("r", 3, "c"))}},
		"another run's key":             {{"r", batch(jline("s", 1, "a"))}},
		"another seq's key":             {{"r", batch(outbox.EventLine{Seq: 1, Line: jline("r", 2, "a").Line})}},
		"not a journal line":            {{"r", batch(outbox.EventLine{Seq: 1, Line: []byte(`{"seq":1}`)})}},
		"not JSON":                      {{"r", batch(outbox.EventLine{Seq: 1, Line: []byte(`{"engine_run_id":"r","seq":1,`)})}},
		"an empty line":                 {{"r", batch(outbox.EventLine{Seq: 1, Line: nil})}},
		"a newline between members":     {{"r", batch(outbox.EventLine{Seq: 1, Line: []byte("{\"engine_run_id\":\"r\",\n\"seq\":1}")})}},
		"a gap inside the batch":        {{"r", batch(jline("r", 1, "a"), jline("r", 3, "c"))}},
		"a run that starts past seq 1":  {{"r", batch(jline("r", 2, "b"))}},
		"a batch past the run's last":   {{"r", batch(jline("r", 1, "a"))}, {"r", batch(jline("r", 3, "c"))}},
		"a re-delivery":                 {{"r", batch(jline("r", 1, "a"), jline("r", 2, "b"))}, {"r", batch(jline("r", 1, "a"), jline("r", 2, "b"), jline("r", 3, "c"))}},
		"a re-delivery of other bytes":  {{"r", batch(jline("r", 1, "a"), jline("r", 2, "b"))}, {"r", batch(jline("r", 2, "B"), jline("r", 3, "c"))}},
		"a conflict behind a good line": {{"r", batch(jline("r", 1, "a"), jline("r", 2, "b"))}, {"r", batch(jline("r", 1, "a"), jline("r", 2, "X"))}},
		"two runs side by side":         {{"r", batch(jline("r", 1, "a"))}, {"s", batch(jline("s", 1, "a"))}, {"r", batch(jline("r", 2, "b"))}},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, err := journal.OpenFile(filepath.Join(t.TempDir(), "journal.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sink := outboxtest.NewSink()
			for i, st := range steps {
				ferr := f.Append(ctx, st.run, st.lines)
				serr := sink.Append(ctx, st.run, st.lines)
				if (ferr == nil) != (serr == nil) || kinds(ferr) != kinds(serr) {
					t.Fatalf("step %d: the file says %v (%s), the sink %v (%s)", i, ferr, kinds(ferr), serr, kinds(serr))
				}
			}
			for _, run := range []string{"r", "s"} {
				last, err := f.LastSeq(run)
				if err != nil {
					t.Fatal(err)
				}
				if got := sink.RunLines(run); int64(len(got)) != last {
					t.Errorf("run %s: the file holds up to seq %d, the sink %d lines", run, last, len(got))
				}
			}
		})
	}
}

func TestTheSinkKeepsEachLineOnceInTheOrderItTookThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sink := outboxtest.NewSink()
	for _, st := range []struct {
		run   string
		lines []outbox.EventLine
	}{
		{"r", batch(jline("r", 1, "a"), jline("r", 2, "b"))},
		{"s", batch(jline("s", 1, "x"))},
		{"r", batch(jline("r", 2, "b"), jline("r", 3, "c"))},
	} {
		if err := sink.Append(ctx, st.run, st.lines); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, l := range sink.Lines() {
		got = append(got, string(l))
	}
	want := []string{string(jline("r", 1, "a").Line), string(jline("r", 2, "b").Line), string(jline("s", 1, "x").Line), string(jline("r", 3, "c").Line)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Lines:\n%q\nwant\n%q", got, want)
	}
	if runs := sink.Runs(); fmt.Sprint(runs) != "[r s]" {
		t.Errorf("Runs %v", runs)
	}
	if n := len(sink.RunLines("r")); n != 3 {
		t.Errorf("run r: %d lines", n)
	}
	sink.RunLines("r")[0][0] = 'X'
	if sink.RunLines("r")[0][0] != '{' {
		t.Error("RunLines hands out the sink's own bytes")
	}
}

func TestASinkSetToFailKeepsNothingUntilItIsSetBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sink := outboxtest.NewSink()
	down := errors.New("down")
	sink.SetErr(down)
	if err := sink.Append(ctx, "r", batch(jline("r", 1, "a"))); !errors.Is(err, down) {
		t.Fatalf("Append: %v, want the error set", err)
	}
	if len(sink.Lines()) != 0 {
		t.Fatal("a failing sink kept a line")
	}
	sink.SetErr(nil)
	if err := sink.Append(ctx, "r", batch(jline("r", 1, "a"))); err != nil {
		t.Fatal(err)
	}
}

// Each hostile batch is taken or refused by the Sink exactly as by a journal file, and never panics it.
func TestTheSinkTakesOrRefusesEachHostileBatchAsTheJournalFileDoes(t *testing.T) {
	t.Parallel()
	l := func(run string, seq int64) outbox.EventLine {
		return outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d}`, run, seq)}
	}
	raw := func(seq int64, s string) outbox.EventLine { return outbox.EventLine{Seq: seq, Line: []byte(s)} }
	cases := []struct {
		name  string
		run   string
		batch []outbox.EventLine
	}{
		{"seq 0", "r", []outbox.EventLine{l("r", 0)}},
		{"seq -1", "r", []outbox.EventLine{l("r", -1)}},
		{"seq max", "r", []outbox.EventLine{l("r", math.MaxInt64)}},
		{"run empty", "", []outbox.EventLine{l("", 1)}},
		{"run ctl", "a\x01", []outbox.EventLine{l("a\x01", 1)}},
		{"run invalid utf8", "a\xff", []outbox.EventLine{raw(1, "{\"engine_run_id\":\"a\xff\",\"seq\":1}")}},
		{"run long", strings.Repeat("a", 300), []outbox.EventLine{l(strings.Repeat("a", 300), 1)}},
		{"cr", "r", []outbox.EventLine{raw(1, "{\"engine_run_id\":\"r\",\"seq\":1}\r")}},
		{"trailing space", "r", []outbox.EventLine{raw(1, "{\"engine_run_id\":\"r\",\"seq\":1} ")}},
		{"SEQ", "r", []outbox.EventLine{raw(1, `{"engine_run_id":"r","seq":1,"SEQ":2}`)}},
		{"empty batch", "r", nil},
		{"dup in batch", "r", []outbox.EventLine{l("r", 1), l("r", 1)}},
		{"seq 1.0", "r", []outbox.EventLine{raw(1, `{"engine_run_id":"r","seq":1.0}`)}},
		{"nul", "r", []outbox.EventLine{raw(1, "{\"engine_run_id\":\"r\",\"seq\":1,\"x\":\"\x00\"}")}},
	}
	for _, c := range cases {
		s := outboxtest.NewSink()
		var serr error
		func() {
			defer func() {
				if v := recover(); v != nil {
					serr = fmt.Errorf("PANIC %v", v)
				}
			}()
			serr = s.Append(context.Background(), c.run, c.batch)
		}()
		f, err := journal.OpenFile(filepath.Join(t.TempDir(), "j.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		ferr := f.Append(context.Background(), c.run, c.batch)
		f.Close()
		if (serr == nil) != (ferr == nil) {
			t.Errorf("%s: sink %v, file %v", c.name, serr, ferr)
		}
	}
}
