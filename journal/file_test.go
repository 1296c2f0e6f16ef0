// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// jline is run "r"'s journal line of seq, told apart from others by a word.
func jline(seq int64, word string) string {
	return fmt.Sprintf(`{"engine_run_id":"r","seq":%d,"w":%q}`, seq, word)
}

// batch is run "r"'s lines from seq from on, one per word.
func batch(from int64, words ...string) []outbox.EventLine {
	out := make([]outbox.EventLine, len(words))
	for i, w := range words {
		seq := from + int64(i)
		out[i] = outbox.EventLine{Seq: seq, Line: []byte(jline(seq, w))}
	}
	return out
}

// text is what batch(from, words...) is in the file.
func text(from int64, words ...string) string {
	var b strings.Builder
	for _, l := range batch(from, words...) {
		b.Write(l.Line)
		b.WriteByte('\n')
	}
	return b.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// faultyOps fails the chosen call: the n-th WriteAt (short after half its bytes, or with an error),
// or every Datasync.
type faultyOps struct {
	osOps
	writeErr   error
	shortAfter int // fail on this WriteAt call (1-based), after writing half of it
	writes     int
	syncErr    error
}

func (o *faultyOps) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	o.writes++
	if o.shortAfter > 0 && o.writes == o.shortAfter {
		n, _ := f.WriteAt(b[:len(b)/2], off)
		return n, o.writeErr
	}
	return f.WriteAt(b, off)
}

func (o *faultyOps) Datasync(f *os.File) error {
	if o.syncErr != nil {
		return o.syncErr
	}
	return datasync(f)
}

func TestAppendWritesWholeBatchesAndReadsBackExactly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(context.Background(), "r", batch(1, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), "r", batch(3, "c")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != text(1, "a", "b", "c") {
		t.Errorf("file = %q", got)
	}
	if err := j.Append(context.Background(), "r", nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
}

func TestAppendRefusesInvalidLinesBeforeWritingAnything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, _ := OpenFile(path)
	defer j.Close()
	for _, bad := range [][]outbox.EventLine{
		{batch(1, "ok")[0], {Seq: 2, Line: []byte(jline(2, "bad") + "\n" + jline(3, "line"))}},
		{batch(1, "ok")[0], {Seq: 2, Line: nil}},
	} {
		if err := j.Append(context.Background(), "r", bad); !errors.Is(err, outbox.ErrInvalidLine) {
			t.Errorf("err = %v, want ErrInvalidLine", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := j.Append(ctx, "r", batch(1, "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if got := readFile(t, path); got != "" {
		t.Errorf("file = %q, want empty", got)
	}
}

func TestAFailedOrShortWriteIsTruncatedBack(t *testing.T) {
	t.Parallel()
	for _, werr := range []error{syscall.EIO, syscall.ENOSPC, nil} {
		path := filepath.Join(t.TempDir(), "j.jsonl")
		ops := &faultyOps{}
		j, err := openFile(path, ops)
		if err != nil {
			t.Fatal(err)
		}
		j.Append(context.Background(), "r", batch(1, "first"))
		ops.writeErr, ops.shortAfter = werr, ops.writes+1
		if werr == nil {
			// A short write without an error: the loop retries the rest, so the batch lands whole.
			ops.writeErr = nil
		}
		err = j.Append(context.Background(), "r", batch(2, strings.Repeat("x", 100), "second"))
		if werr != nil {
			if !errors.Is(err, werr) {
				t.Errorf("err = %v, want %v", err, werr)
			}
			if got := readFile(t, path); got != text(1, "first") {
				t.Errorf("after a failed write (%v) the file is %q, want only the first batch", werr, got)
			}
			// The file is still usable: the next batch goes right after the first.
			ops.shortAfter = 0
			if err := j.Append(context.Background(), "r", batch(2, "third")); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, path); got != text(1, "first", "third") {
				t.Errorf("file = %q", got)
			}
		} else if err != nil || readFile(t, path) != text(1, "first", strings.Repeat("x", 100), "second") {
			t.Errorf("short write: (%v) %q", err, readFile(t, path))
		}
		j.Close()
	}
}

func TestAfterAFailedFdatasyncTheFileIsNotTrustedUntilReopened(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	ops := &faultyOps{}
	j, err := openFile(path, ops)
	if err != nil {
		t.Fatal(err)
	}
	j.Append(context.Background(), "r", batch(1, "first"))
	ops.syncErr = syscall.EIO
	if err := j.Append(context.Background(), "r", batch(2, "second")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want EIO", err)
	}
	ops.syncErr = nil
	if err := j.Append(context.Background(), "r", batch(2, "third")); !errors.Is(err, ErrFailed) {
		t.Errorf("append after a failed fdatasync: %v, want ErrFailed", err)
	}
	j.Close()
	j, err = OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(context.Background(), "r", batch(2, "second")); err != nil {
		t.Fatalf("append after reopening: %v", err)
	}
	if got := readFile(t, path); got != text(1, "first", "second") {
		t.Errorf("file = %q", got)
	}
}

func TestOpenFileCutsATornTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	for _, tc := range []struct{ before, after string }{
		{text(1, "a", "b") + jline(3, "half a line")[:12], text(1, "a", "b")},
		{jline(1, "no newline at all"), ""},
		{text(1, "a"), text(1, "a")},
		{"", ""},
	} {
		os.WriteFile(path, []byte(tc.before), 0o644)
		j, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, path); got != tc.after {
			t.Errorf("%q opened as %q, want %q", tc.before, got, tc.after)
		}
		next := int64(strings.Count(tc.after, "\n") + 1)
		j.Append(context.Background(), "r", batch(next, "next"))
		if got := readFile(t, path); got != tc.after+text(next, "next") {
			t.Errorf("%q then an append: %q", tc.before, got)
		}
		j.Close()
	}
}

func TestATornTailLongerThanTheScanChunkIsCut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	os.WriteFile(path, []byte(text(1, "a")+jline(2, strings.Repeat("y", 200_000))), 0o644)
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got := readFile(t, path); got != text(1, "a") {
		t.Errorf("file has %d bytes, want %d", len(got), len(text(1, "a")))
	}
}

func TestASecondOpenFileGetsErrLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path); !errors.Is(err, ErrLocked) {
		t.Errorf("second OpenFile: %v, want ErrLocked", err)
	}
	j.Close()
	j2, err := OpenFile(path)
	if err != nil {
		t.Fatalf("OpenFile after Close: %v", err)
	}
	j2.Close()
	if err := j2.Append(context.Background(), "r", batch(1, "x")); err == nil {
		t.Error("Append after Close succeeded")
	}
	// The created file is in its directory.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "j.jsonl" {
		t.Errorf("directory holds %v", entries)
	}
}

// TestAReopenRightAfterCloseIsNotRefusedWhileChildrenAreForked: a child being forked (os/exec)
// holds a copy of the journal's descriptor until its exec, and the lock with it unless Close gives the
// lock up itself.
func TestAReopenRightAfterCloseIsNotRefusedWhileChildrenAreForked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	forks, stop := outboxtest.ForkContinually(t)
	defer stop()
	// Until enough children have come and gone for the race to have had its chances: it was lost
	// about once in 30 reopens.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; forks.Load() < 200 && time.Now().Before(deadline); i++ {
		j, err := OpenFile(path)
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.n++
		return copy(p, `{"engine_run_id":"r","seq":1}`+"\n"), nil
	}
	return 0, syscall.EIO
}

func TestTheJournalsEntryPointsRefuseBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, path := range []string{"", dir, filepath.Join(dir, "missing", "j.jsonl")} {
		if j, err := OpenFile(path); err == nil {
			j.Close()
			t.Errorf("OpenFile(%q) succeeded", path)
		}
	}
	rep, err := Verify(&failingReader{})
	if !errors.Is(err, syscall.EIO) || rep.Lines != 1 {
		t.Errorf("Verify of a failing reader: (%+v, %v), want EIO after 1 line", rep, err)
	}
}

// TestAnErrorNamesThePackageOnce: the typical failures of the journal's entry points read
// "journal: …" once, however many of the package's functions the error passed through, and still
// wrap the sentinel a caller branches on.
func TestAnErrorNamesThePackageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		want error // nil: no sentinel, only the package's prefix
		fail func(t *testing.T) error
	}{
		{"a journal in a missing directory", nil, func(t *testing.T) error {
			_, err := OpenFile(filepath.Join(t.TempDir(), "missing", "j.jsonl"))
			return err
		}},
		{"a file that is not a journal", ErrNotJournal, func(t *testing.T) error {
			path := filepath.Join(t.TempDir(), "notes.txt")
			if err := os.WriteFile(path, []byte("not a journal\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := OpenFile(path)
			return err
		}},
		{"a journal another File holds", ErrLocked, func(t *testing.T) error {
			_, path := openTemp(t)
			_, err := OpenFile(path)
			return err
		}},
		{"a batch that leaves a gap", ErrStreamGap, func(t *testing.T) error {
			j, _ := openTemp(t)
			return j.Append(ctx, "r", batch(2, "b"))
		}},
		{"a line that is not a journal line", ErrMalformed, func(t *testing.T) error {
			j, _ := openTemp(t)
			return j.Append(ctx, "r", []outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"r"}`)}})
		}},
		{"a redelivery with other bytes", ErrPayloadConflict, func(t *testing.T) error {
			j, _ := openTemp(t)
			if err := j.Append(ctx, "r", batch(1, "a")); err != nil {
				t.Fatal(err)
			}
			return j.Append(ctx, "r", batch(1, "b"))
		}},
		{"a file another program appended to", ErrModified, func(t *testing.T) error {
			j, path := openTemp(t)
			if err := appendBytes(path, jline(1, "a")+"\n"); err != nil {
				t.Fatal(err)
			}
			return j.Append(ctx, "r", batch(1, "a"))
		}},
		{"an append after a failed fdatasync", ErrFailed, func(t *testing.T) error {
			ops := &faultyOps{syncErr: syscall.EIO}
			j, err := openFile(filepath.Join(t.TempDir(), "j.jsonl"), ops)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			if err := j.Append(ctx, "r", batch(1, "a")); !errors.Is(err, syscall.EIO) {
				t.Fatalf("append with a failing fdatasync: %v, want EIO", err)
			}
			return j.Append(ctx, "r", batch(1, "a"))
		}},
		{"a verified journal with a gap", ErrStreamGap, func(t *testing.T) error {
			_, err := Verify(strings.NewReader(text(1, "a") + jline(3, "c") + "\n"))
			return err
		}},
		{"a line key of a line that is not JSON", ErrMalformed, func(t *testing.T) error {
			_, _, err := LineKey([]byte(`{"engine_run_id":"r","seq":1`))
			return err
		}},
		{"a line holding a newline", outbox.ErrInvalidLine, func(t *testing.T) error {
			j, _ := openTemp(t)
			err := j.Append(ctx, "r", []outbox.EventLine{{Seq: 1, Line: []byte("{\n}")}})
			if !errors.Is(err, outbox.ErrSinkRefused) {
				t.Errorf("err = %v, want it to wrap outbox.ErrSinkRefused too", err)
			}
			if n := strings.Count(err.Error(), "outbox:"); n != 1 {
				t.Errorf("%q names the outbox package %d times, want once", err, n)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fail(t)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if n := strings.Count(err.Error(), "journal:"); n != 1 || !strings.HasPrefix(err.Error(), "journal: ") {
				t.Errorf("%q names the package %d times, want once, first", err, n)
			}
		})
	}
}
