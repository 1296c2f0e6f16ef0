// SPDX-License-Identifier: Apache-2.0

package outboxtest_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
	"github.com/textmachine/outbox/outboxtest"
)

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
