// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/outbox"
)

func openTemp(t *testing.T) (*File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, path
}

func TestAppendRefusesALineWhoseKeyIsNotItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		lines []outbox.EventLine
		says  []string // what the error must name
	}{
		"another run": {[]outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"other","seq":1}`)}}, []string{`"r"`, "seq 1", `"other"`}},
		"another seq": {[]outbox.EventLine{{Seq: 2, Line: []byte(jline(1, "a"))}}, []string{`"r"`, "seq 2", "seq 1"}},
		"seq 1 always, second line": {[]outbox.EventLine{{Seq: 1, Line: []byte(jline(1, "a"))}, {Seq: 2, Line: []byte(jline(1, "b"))}},
			[]string{`"r"`, "seq 2", "seq 1"}},
		"a run id that differs by an escape": {[]outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"r\u0000","seq":1}`)}}, []string{`"r"`, `"r\x00"`}},
		"not a journal line":                 {[]outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"r"}`)}}, []string{`"r"`, "seq 1", "malformed", `no "seq"`}},
		"not JSON":                           {[]outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"r","seq":1`)}}, []string{"malformed", "not JSON"}},
	} {
		j, path := openTemp(t)
		err := j.Append(ctx, "r", tc.lines)
		if !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("%s: %v, want ErrSinkRefused", name, err)
			continue
		}
		for _, want := range tc.says {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %s", name, err, want)
			}
		}
		if got := readFile(t, path); got != "" {
			t.Errorf("%s: the file holds %q", name, got)
		}
	}
}

func TestAppendRefusesABatchThatWouldLeaveAGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j, path := openTemp(t)
	if err := j.Append(ctx, "r", batch(1, "a", "b")); err != nil {
		t.Fatal(err)
	}
	want := readFile(t, path)
	skip := []outbox.EventLine{batch(3, "c")[0], batch(5, "e")[0]}
	for name, tc := range map[string]struct {
		run   string
		lines []outbox.EventLine
	}{
		"seqs not consecutive in the batch":    {"r", skip},
		"a seq repeated in the batch":          {"r", append(batch(3, "c"), batch(3, "c")...)},
		"more than one past the last":          {"r", batch(4, "d")},
		"a run the journal does not hold at 2": {"s", []outbox.EventLine{{Seq: 2, Line: []byte(`{"engine_run_id":"s","seq":2}`)}}},
	} {
		err := j.Append(ctx, tc.run, tc.lines)
		if !errors.Is(err, ErrStreamGap) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("%s: %v, want ErrStreamGap and ErrSinkRefused", name, err)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.run)) {
			t.Errorf("%s: %q does not name the run", name, err)
		}
	}
	if got := readFile(t, path); got != want {
		t.Errorf("the file holds %q, want %q", got, want)
	}
	// The same after a reopen, when the File has to read the run back from the file.
	j.Close()
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(ctx, "s", []outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"s","seq":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(ctx, "r", batch(4, "d")); !errors.Is(err, ErrStreamGap) || !strings.Contains(err.Error(), "up to seq 2") {
		t.Errorf("after a reopen: %v, want ErrStreamGap naming seq 2", err)
	}
	if err := j.Append(ctx, "r", batch(3, "c")); err != nil {
		t.Errorf("the next seq after a reopen: %v", err)
	}
}

func TestAppendAcceptsARedeliveryThatStartsAtOrBeforeTheRunsLastSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j, path := openTemp(t)
	if err := j.Append(ctx, "r", batch(1, "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, b := range [][]outbox.EventLine{batch(2, "b", "c"), batch(3, "c", "d"), batch(1, "a"), batch(5, "e")} {
		if err := j.Append(ctx, "r", b); err != nil {
			t.Fatalf("batch from %d: %v", b[0].Seq, err)
		}
	}
	if rep, err := Verify(strings.NewReader(readFile(t, path))); err != nil || rep.Runs["r"].Last != 5 || rep.Duplicates != 4 {
		t.Errorf("(%+v, %v)", rep, err)
	}
}

// bigJournal writes runs interleaved lines until the file holds about size bytes, then run "tail"'s
// first line: runs near the start, "tail" at the end.
func bigJournal(t *testing.T, runs, size int) (string, map[string]int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.jsonl")
	last := map[string]int64{}
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		run := fmt.Sprintf("run-%d", i%runs)
		last[run]++
		fmt.Fprintf(&b, `{"engine_run_id":%q,"seq":%d,"pad":"%s"}`+"\n", run, last[run], strings.Repeat("p", 100))
	}
	fmt.Fprintf(&b, `{"engine_run_id":"tail","seq":1}`+"\n")
	last["tail"] = 1
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, last
}

func TestTheFileIsReadOnceWhileOpenWhateverTheAppends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, last := bigJournal(t, 10, 8<<20)
	size := int64(len(readFile(t, path)))
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	next := func(run string) []outbox.EventLine {
		seq := last[run] + 1
		last[run] = seq
		return []outbox.EventLine{{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d}`, run, seq)}}
	}
	for range 100 {
		if err := j.Append(ctx, "tail", next("tail")); err != nil {
			t.Fatal(err)
		}
	}
	if j.read != size {
		t.Errorf("the first appends read %d bytes of a file of %d", j.read, size)
	}
	// Runs the journal does not hold, and runs near its start, many times over: the index answers,
	// and nothing more is read.
	for i := range 50 {
		run := fmt.Sprintf("absent-%d", i)
		if err := j.Append(ctx, run, []outbox.EventLine{{Seq: 7, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":7}`, run)}}); !errors.Is(err, ErrStreamGap) {
			t.Fatalf("%s: %v, want ErrStreamGap", run, err)
		}
		if err := j.Append(ctx, fmt.Sprintf("run-%d", i%10), next(fmt.Sprintf("run-%d", i%10))); err != nil {
			t.Fatal(err)
		}
	}
	for run, want := range last {
		if got, err := j.LastSeq(run); err != nil || got != want {
			t.Errorf("LastSeq(%q) = (%d, %v), want %d", run, got, err, want)
		}
	}
	if j.read != size {
		t.Errorf("%d bytes read from a file of %d after appends to every run and LastSeq of each", j.read, size)
	}
	// A re-delivery of a line near the start reads less than a span's reach to find it.
	before := j.read
	if err := j.Append(ctx, "run-0", []outbox.EventLine{{Seq: 1, Line: fmt.Appendf(nil, `{"engine_run_id":"run-0","seq":1,"pad":"%s"}`, strings.Repeat("p", 100))}}); err != nil {
		t.Fatal(err)
	}
	if got := j.read - before; got == 0 || got > spanReach+readChunk {
		t.Errorf("a re-delivery of seq 1 read %d bytes", got)
	}
}

func TestLastSeqIsTheRunsHighestSeqOrZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j, path := openTemp(t)
	if got, err := j.LastSeq("r"); err != nil || got != 0 {
		t.Errorf("empty journal: (%d, %v)", got, err)
	}
	j.Append(ctx, "r", batch(1, "a", "b", "c"))
	j.Append(ctx, "s", []outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"s","seq":1}`)}})
	j.Append(ctx, "r", batch(2, "b")) // a re-delivery: the highest seq stays 3
	j.Close()
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for run, want := range map[string]int64{"r": 3, "s": 1, "t": 0} {
		if got, err := j.LastSeq(run); err != nil || got != want {
			t.Errorf("LastSeq(%q) = (%d, %v), want %d", run, got, err, want)
		}
	}
	j.Close()
	if _, err := j.LastSeq("r"); err == nil {
		t.Error("LastSeq after Close succeeded")
	}
}

func TestAppendRefusesALineLongerThanTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j, path := openTemp(t)
	line := func(n int) []outbox.EventLine {
		head := `{"engine_run_id":"r","seq":1,"x":"`
		return []outbox.EventLine{{Seq: 1, Line: []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)}}
	}
	err := j.Append(ctx, "r", line(outbox.DefaultMaxLineSize+1))
	if !errors.Is(err, outbox.ErrInvalidLine) || !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("%v, want ErrInvalidLine", err)
	}
	for _, size := range []int{outbox.DefaultMaxLineSize + 1, outbox.DefaultMaxLineSize} {
		if !strings.Contains(err.Error(), fmt.Sprint(size)) {
			t.Errorf("%q does not name %d", err, size)
		}
	}
	if got := readFile(t, path); got != "" {
		t.Errorf("the file holds %d bytes", len(got))
	}
	if err := j.Append(ctx, "r", line(outbox.DefaultMaxLineSize)); err != nil {
		t.Errorf("a line of exactly the limit: %v", err)
	}
}

func TestAppendRefusesALineThatDoesNotBeginAsAJournalLine(t *testing.T) {
	t.Parallel()
	j, path := openTemp(t)
	err := j.Append(context.Background(), "r", []outbox.EventLine{{Seq: 1, Line: []byte(` {"engine_run_id":"r","seq":1}`)}})
	if !errors.Is(err, outbox.ErrInvalidLine) || !errors.Is(err, outbox.ErrSinkRefused) {
		t.Errorf("%v, want ErrInvalidLine", err)
	}
	if got := readFile(t, path); got != "" {
		t.Errorf("the file holds %q", got)
	}
}

// TestARedeliveryWithOtherBytesIsAConflict: a batch that repeats lines the file holds is appended
// only when it carries the same bytes; a line under a key the file holds with other bytes is refused
// as a payload conflict, which the reader would quarantine the run for, and nothing is written.
func TestARedeliveryWithOtherBytesIsAConflict(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	mk := func(seq int64, what string) outbox.EventLine {
		return outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"what":%q}`, seq, what)}
	}
	if err := j.Append(ctx, "r", []outbox.EventLine{mk(1, "a"), mk(2, "b"), mk(3, "c")}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for name, batch := range map[string][]outbox.EventLine{
		"from seq 2":            {mk(2, "other"), mk(3, "c"), mk(4, "d")},
		"from seq 1":            {mk(1, "a"), mk(2, "b"), mk(3, "other")},
		"the last line, longer": {mk(3, "c and more")},
	} {
		err := j.Append(ctx, "r", batch)
		if !errors.Is(err, ErrPayloadConflict) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("%s: %v, want ErrPayloadConflict and ErrSinkRefused", name, err)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("a refused re-delivery changed the file")
	}
	// The same bytes again are a re-delivery, as after a crash, and go on from there; after a reopen
	// too.
	if err := j.Append(ctx, "r", []outbox.EventLine{mk(2, "b"), mk(3, "c"), mk(4, "d")}); err != nil {
		t.Fatalf("an identical re-delivery: %v", err)
	}
	j.Close()
	j2, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if err := j2.Append(ctx, "r", []outbox.EventLine{mk(4, "other")}); !errors.Is(err, ErrPayloadConflict) {
		t.Errorf("a conflicting re-delivery after a reopen: %v", err)
	}
	if err := j2.Append(ctx, "r", []outbox.EventLine{mk(4, "d"), mk(5, "e")}); err != nil {
		t.Errorf("an identical re-delivery after a reopen: %v", err)
	}
	raw, _ := os.ReadFile(path)
	rep, err := Verify(bytes.NewReader(raw))
	if err != nil || rep.Runs["r"].Last != 5 {
		t.Errorf("Verify: (%+v, %v)", rep, err)
	}
}
