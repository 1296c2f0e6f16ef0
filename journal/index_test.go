// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/textmachine/outbox/outbox"
)

// lineOf is run's journal line of seq, exactly n bytes long (n of at least 64).
func lineOf(run string, seq int64, n int, fill byte) []byte {
	head := fmt.Sprintf(`{"engine_run_id":%q,"seq":%d,"x":"`, run, seq)
	return append(append([]byte(head), bytes.Repeat([]byte{fill}, n-len(head)-2)...), '"', '}')
}

func writeLines(t *testing.T, lines ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustOpen(t *testing.T, path string) *File {
	t.Helper()
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// lineSizes are the lengths around every size the File reads or grows by: inspect's first window,
// half a chunk (where the reader's buffer grows), a chunk and a span's reach, twice a chunk (the
// buffer doubled), and the limit.
func lineSizes() []int {
	seen := map[int]bool{}
	var sizes []int
	for _, n := range []int{64 << 10, readChunk / 2, readChunk, spanReach, 2 * readChunk} {
		for _, m := range []int{n - 1, n, n + 1} {
			if !seen[m] {
				seen[m] = true
				sizes = append(sizes, m)
			}
		}
	}
	return append(sizes, 3*readChunk/2, outbox.DefaultMaxLineSize-1, outbox.DefaultMaxLineSize)
}

func TestALongLineAnywhereInTheFileIsReadAndComparedInFullAtEveryChunkSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	short := func(seq int64) []byte { return lineOf("r", seq, 80, 'a') }
	for _, n := range lineSizes() {
		for name, file := range map[string][][]byte{
			"last":            {short(1), lineOf("r", 2, n, 'l')},
			"before the last": {short(1), lineOf("r", 2, n, 'l'), short(3)},
			"first":           {lineOf("r", 1, n, 'l'), short(2)},
		} {
			if n >= outbox.DefaultMaxLineSize-1 && name != "before the last" && os.Getenv("OUTBOX_HEAVY") == "" {
				continue // the limit in one place in make test, in every place in make reliability
			}
			what := fmt.Sprintf("a line of %d bytes %s", n, name)
			path := writeLines(t, file...)
			j := mustOpen(t, path)
			want := int64(len(file))
			if got, err := j.LastSeqContext(ctx, "r"); err != nil || got != want {
				t.Fatalf("%s: LastSeq = (%d, %v), want %d", what, got, err, want)
			}
			if got, err := j.LastSeq("other"); err != nil || got != 0 {
				t.Fatalf("%s: LastSeq of another run = (%d, %v)", what, got, err)
			}
			seq := int64(2)
			if name == "first" {
				seq = 1
			}
			other := lineOf("r", seq, n, 'o')
			err := j.Append(ctx, "r", []outbox.EventLine{{Seq: seq, Line: other}})
			if !errors.Is(err, ErrPayloadConflict) || !errors.Is(err, outbox.ErrSinkRefused) {
				t.Fatalf("%s: a conflicting copy: %v, want ErrPayloadConflict", what, err)
			}
			var redelivery []outbox.EventLine
			for i, l := range file[seq-1:] {
				redelivery = append(redelivery, outbox.EventLine{Seq: seq + int64(i), Line: l})
			}
			if err := j.Append(ctx, "r", redelivery); err != nil {
				t.Fatalf("%s: a re-delivery: %v", what, err)
			}
			if got := j.read; got > 4*int64(n)+4*readChunk {
				t.Errorf("%s: %d bytes read", what, got)
			}
			j.Close()
			f, _ := os.Open(path)
			rep, err := Verify(f)
			f.Close()
			if err != nil || rep.Runs["r"].Last != want || rep.Duplicates != len(redelivery) {
				t.Errorf("%s: Verify = (%+v, %v)", what, rep, err)
			}
			os.Remove(path)
		}
	}
}

func TestALineLongerThanTheLimitInTheFileIsSkippedWithoutHoldingIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, n := range []int{outbox.DefaultMaxLineSize + 1, outbox.DefaultMaxLineSize + readChunk + 1, 2*outbox.DefaultMaxLineSize + 3} {
		path := writeLines(t, lineOf("r", 1, 80, 'a'), lineOf("x", 1, n, 'x'), lineOf("r", 2, 80, 'b'))
		j := mustOpen(t, path)
		if got, err := j.LastSeqContext(ctx, "r"); err != nil || got != 2 {
			t.Errorf("%d bytes: LastSeq(r) = (%d, %v), want 2", n, got, err)
		}
		if got, err := j.LastSeqContext(ctx, "x"); err != nil || got != 0 {
			t.Errorf("%d bytes: LastSeq(x) = (%d, %v), want 0: the line is no line the File takes", n, got, err)
		}
		if cap(j.rbuf) > readChunk {
			t.Errorf("%d bytes: the reader kept a buffer of %d", n, cap(j.rbuf))
		}
		j.Close()
		os.Remove(path)
	}
}

// cancelAfter is a context that is done from its n-th look on: a whole-file read is cancelled part
// way, at a point the test knows.
type cancelAfter struct {
	context.Context
	left   atomic.Int64
	onDone func()
}

func newCancelAfter(n int64, onDone func()) *cancelAfter {
	c := &cancelAfter{Context: context.Background(), onDone: onDone}
	c.left.Store(n)
	return c
}

func (c *cancelAfter) Err() error {
	n := c.left.Add(-1)
	switch {
	case n > 0:
		return nil
	case c.onDone != nil:
		if n == 0 {
			c.onDone()
		}
		return nil
	}
	return context.Canceled
}

func TestAWholeFileReadStopsWhenItsContextIsDoneAndTakesUpWhereItStopped(t *testing.T) {
	t.Parallel()
	path, last := bigJournal(t, 10, 8<<20)
	size := int64(len(readFile(t, path)))
	j := mustOpen(t, path)
	if _, err := j.LastSeqContext(newCancelAfter(3, nil), "run-1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("LastSeq with a context done part way: %v, want context.Canceled", err)
	}
	if j.read == 0 || j.read >= size {
		t.Fatalf("the cancelled read read %d bytes of %d", j.read, size)
	}
	line := []outbox.EventLine{{Seq: last["tail"] + 1, Line: fmt.Appendf(nil, `{"engine_run_id":"tail","seq":%d}`, last["tail"]+1)}}
	if err := j.Append(newCancelAfter(2, nil), "tail", line); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a context done part way: %v, want context.Canceled", err)
	}
	if got := int64(len(readFile(t, path))); got != size {
		t.Fatalf("the cancelled Append left the file at %d bytes, was %d", got, size)
	}
	for run, want := range last {
		if got, err := j.LastSeq(run); err != nil || got != want {
			t.Errorf("LastSeq(%q) = (%d, %v), want %d", run, got, err, want)
		}
	}
	if j.read > size+2*readChunk {
		t.Errorf("%d bytes read for a file of %d: the read started again", j.read, size)
	}
}

func TestCloseStopsAWholeFileReadUnderWay(t *testing.T) {
	t.Parallel()
	path, _ := bigJournal(t, 10, 8<<20)
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	ctx := newCancelAfter(3, func() {
		go func() { closed <- j.Close() }()
		for !j.closing.Load() {
			// Close sets the flag before it waits for the lock.
		}
	})
	if _, err := j.LastSeqContext(ctx, "run-1"); !errors.Is(err, errClosing) {
		t.Errorf("LastSeq during Close: %v, want it to give up", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := j.LastSeq("run-1"); err == nil {
		t.Error("LastSeq after Close succeeded")
	}
}

func TestABatchTheFileHoldsWithOtherBytesIsRefusedWhereverTheCopyIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func(id string, from, to int64, fill byte) [][]byte {
		var out [][]byte
		for s := from; s <= to; s++ {
			out = append(out, lineOf(id, s, 100, fill))
		}
		return out
	}
	var file [][]byte
	file = append(file, run("engine-1", 1, 100, 'a')...)
	file = append(file, run("other", 1, 30_000, 'o')...) // 3 MiB: three spans' reach
	file = append(file, run("engine-1", 50, 60, 'a')...) // a re-delivery
	file = append(file, run("tail", 1, 1, 't')...)
	path := writeLines(t, file...)
	size := int64(len(readFile(t, path)))
	j := mustOpen(t, path)
	lines := func(id string, from, to int64, fill byte) []outbox.EventLine {
		var out []outbox.EventLine
		for i, l := range run(id, from, to, fill) {
			out = append(out, outbox.EventLine{Seq: from + int64(i), Line: l})
		}
		return out
	}
	for name, b := range map[string][]outbox.EventLine{
		"a first batch at seq 1":                     lines("engine-1", 1, 4, 'b'),
		"a first batch whose last line differs":      append(lines("engine-1", 1, 3, 'a'), lines("engine-1", 4, 4, 'b')...),
		"a batch past the re-delivered copies":       lines("engine-1", 61, 62, 'b'),
		"a batch over the end of the run's lines":    append(lines("engine-1", 99, 99, 'a'), lines("engine-1", 100, 101, 'b')...),
		"a batch of a run between others":            lines("other", 15_000, 15_001, 'b'),
		"a batch of the run of the file's last line": lines("tail", 1, 2, 'b'),
	} {
		err := j.Append(ctx, string(runOf(b[0].Line)), b)
		if !errors.Is(err, ErrPayloadConflict) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("%s: %v, want ErrPayloadConflict", name, err)
		}
	}
	if got := int64(len(readFile(t, path))); got != size {
		t.Fatalf("the file grew from %d to %d bytes", size, got)
	}
	// The file once, and for each batch the span that holds its copies.
	if j.read > size+6*(spanReach+readChunk) {
		t.Errorf("%d bytes read for a file of %d: more than the index and the copies", j.read, size)
	}
	for _, b := range [][]outbox.EventLine{lines("engine-1", 1, 4, 'a'), lines("engine-1", 55, 101, 'a'), lines("engine-2", 1, 3, 'c')} {
		if err := j.Append(ctx, string(runOf(b[0].Line)), b); err != nil {
			t.Errorf("run %s from %d: %v", runOf(b[0].Line), b[0].Seq, err)
		}
	}
	// Lines this File appended are indexed as they are written.
	if err := j.Append(ctx, "engine-2", lines("engine-2", 2, 2, 'd')); !errors.Is(err, ErrPayloadConflict) {
		t.Errorf("a conflict with a line appended since the open: %v", err)
	}
	j.Close()
	f, _ := os.Open(path)
	defer f.Close()
	if rep, err := Verify(f); err != nil || rep.Runs["engine-1"].Last != 101 || rep.Runs["engine-2"].Last != 3 {
		t.Errorf("Verify = (%+v, %v)", rep.Runs, err)
	}
}

func runOf(line []byte) []byte {
	run, _, _ := LineKey(line)
	return []byte(run)
}

func TestTheIndexKeepsASpanPerMiBOfARunsLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var file [][]byte
	for s := int64(1); s <= 40_000; s++ { // 4 MiB of run a, with b's lines between
		file = append(file, lineOf("a", s, 100, 'a'))
		if s%2 == 0 {
			file = append(file, lineOf("b", s/2, 100, 'b'))
		}
	}
	for s := int64(1); s <= 5_000; s++ { // copies of earlier lines
		file = append(file, lineOf("a", s, 100, 'a'))
	}
	j := mustOpen(t, writeLines(t, file...))
	if _, err := j.LastSeqContext(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for run, most := range map[string]int{"a": 7, "b": 7} {
		if n := len(j.runs.runs[run].spans); n > most {
			t.Errorf("run %s: %d spans, want at most %d", run, n, most)
		}
	}
}

// FuzzTheIndexAgreesWithTheLinesOfTheFile: whatever order a file holds runs' lines in (interleaved,
// repeated, out of order, with gaps), LastSeq is each run's highest seq, a copy of a line the file
// holds is taken, the same key with other bytes is a payload conflict, and a seq the file skips is a
// gap.
func FuzzTheIndexAgreesWithTheLinesOfTheFile(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 2, 0, 1, 1, 0, 0, 3, 0})
	f.Add([]byte{0, 5, 0, 0, 4, 0, 0, 3, 0, 0, 1, 0, 0, 2, 0})
	f.Add([]byte{0, 1, 255, 0, 2, 255, 1, 1, 0, 0, 3, 255, 0, 4, 255, 0, 5, 255, 0, 1, 0})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		type key struct {
			run string
			seq int64
		}
		pad := map[key]int{}
		top := map[string]int64{}
		var file [][]byte
		long := 0
		for i := 0; i+2 < len(in) && len(file) < 64; i += 3 {
			k := key{fmt.Sprintf("r%d", in[i]%3), 1 + int64(in[i+1]%12)}
			if _, ok := pad[k]; !ok {
				pad[k] = 80 + int(in[i+2])
				if in[i+2] == 255 && long < 8 {
					pad[k], long = 400<<10, long+1 // lines that fill a span's reach
				}
			}
			file = append(file, lineOf(k.run, k.seq, pad[k], 'p'))
			top[k.run] = max(top[k.run], k.seq)
		}
		path := filepath.Join(dir, "j.jsonl")
		os.Remove(path)
		if len(file) > 0 {
			var b []byte
			for _, l := range file {
				b = append(append(b, l...), '\n')
			}
			os.WriteFile(path, b, 0o644)
		}
		j, err := openFile(path, noSyncOps{})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		ctx := context.Background()
		for _, run := range []string{"r0", "r1", "r2"} {
			if got, err := j.LastSeq(run); err != nil || got != top[run] {
				t.Fatalf("LastSeq(%s) = (%d, %v), want %d", run, got, err, top[run])
			}
			for seq := int64(1); seq <= top[run]; seq++ {
				n, held := pad[key{run, seq}]
				if !held {
					l := lineOf(run, seq, 80, 'p')
					if err := j.Append(ctx, run, []outbox.EventLine{{Seq: seq, Line: l}}); !errors.Is(err, ErrStreamGap) {
						t.Fatalf("%s seq %d, which the file skips: %v, want ErrStreamGap", run, seq, err)
					}
					continue
				}
				err := j.Append(ctx, run, []outbox.EventLine{{Seq: seq, Line: lineOf(run, seq, n, 'q')}})
				if !errors.Is(err, ErrPayloadConflict) {
					t.Fatalf("%s seq %d with other bytes: %v, want ErrPayloadConflict", run, seq, err)
				}
				if err := j.Append(ctx, run, []outbox.EventLine{{Seq: seq, Line: lineOf(run, seq, n, 'p')}}); err != nil {
					t.Fatalf("%s seq %d, a copy: %v", run, seq, err)
				}
			}
		}
	})
}

func TestOpenFileRefusesWhatIsNotARegularFileWithoutOpeningIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for path, what := range map[string]string{
		fifo:       "a named pipe",
		link:       "a named pipe",
		dir:        "a directory",
		os.DevNull: "a character device",
		sock:       "a socket",
	} {
		j, err := OpenFile(path)
		if err == nil {
			j.Close()
		}
		if !errors.Is(err, ErrNotJournal) || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), path) {
			t.Errorf("OpenFile(%s) = %v, want ErrNotJournal naming %s", path, err, what)
		}
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode().Type() != os.ModeNamedPipe {
		t.Errorf("the FIFO is now %v (%v)", st.Mode(), err)
	}
}

func listenUnix(path string) (net.Listener, error) { return net.Listen("unix", path) }
