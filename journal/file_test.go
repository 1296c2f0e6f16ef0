package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

func lines(ss ...string) []outbox.EventLine {
	out := make([]outbox.EventLine, len(ss))
	for i, s := range ss {
		out[i] = outbox.EventLine{Seq: int64(i + 1), Line: []byte(s)}
	}
	return out
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
	if err := j.Append(context.Background(), "r", lines("a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), "r", lines("c")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != "a\nb\nc\n" {
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
	for _, bad := range [][]outbox.EventLine{lines("ok", "bad\nline"), lines("ok", "")} {
		if err := j.Append(context.Background(), "r", bad); !errors.Is(err, outbox.ErrInvalidLine) {
			t.Errorf("err = %v, want ErrInvalidLine", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := j.Append(ctx, "r", lines("x")); !errors.Is(err, context.Canceled) {
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
		j.Append(context.Background(), "r", lines("first"))
		ops.writeErr, ops.shortAfter = werr, ops.writes+1
		if werr == nil {
			// A short write without an error: the loop retries the rest, so the batch lands whole.
			ops.writeErr = nil
		}
		err = j.Append(context.Background(), "r", lines(strings.Repeat("x", 100), "second"))
		if werr != nil {
			if !errors.Is(err, werr) {
				t.Errorf("err = %v, want %v", err, werr)
			}
			if got := readFile(t, path); got != "first\n" {
				t.Errorf("after a failed write (%v) the file is %q, want only the first batch", werr, got)
			}
			// The file is still usable: the next batch goes right after the first.
			ops.shortAfter = 0
			if err := j.Append(context.Background(), "r", lines("third")); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, path); got != "first\nthird\n" {
				t.Errorf("file = %q", got)
			}
		} else if err != nil || readFile(t, path) != "first\n"+strings.Repeat("x", 100)+"\nsecond\n" {
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
	j.Append(context.Background(), "r", lines("first"))
	ops.syncErr = syscall.EIO
	if err := j.Append(context.Background(), "r", lines("second")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want EIO", err)
	}
	ops.syncErr = nil
	if err := j.Append(context.Background(), "r", lines("third")); !errors.Is(err, ErrFailed) {
		t.Errorf("append after a failed fdatasync: %v, want ErrFailed", err)
	}
	j.Close()
	j, err = OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(context.Background(), "r", lines("second")); err != nil {
		t.Fatalf("append after reopening: %v", err)
	}
	if got := readFile(t, path); got != "first\nsecond\n" {
		t.Errorf("file = %q", got)
	}
}

func TestOpenFileCutsATornTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	for _, tc := range []struct{ before, after string }{
		{"a\nb\nhalf a li", "a\nb\n"},
		{"no newline at all", ""},
		{"a\n", "a\n"},
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
		j.Append(context.Background(), "r", lines("next"))
		if got := readFile(t, path); got != tc.after+"next\n" {
			t.Errorf("%q then an append: %q", tc.before, got)
		}
		j.Close()
	}
}

func TestATornTailLongerThanTheScanChunkIsCut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	os.WriteFile(path, []byte("a\n"+strings.Repeat("y", 200_000)), 0o644)
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got := readFile(t, path); got != "a\n" {
		t.Errorf("file has %d bytes, want 2", len(got))
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
	if err := j2.Append(context.Background(), "r", lines("x")); err == nil {
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
