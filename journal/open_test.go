// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/flock"
	"github.com/textmachine/outbox/outbox"
)

// TestOpenFileRefusesAFileThatIsNotAJournal: whatever it is, the file is left byte for byte as it was,
// with its modification time, and unlocked.
func TestOpenFileRefusesAFileThatIsNotAJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	book := filepath.Join(dir, "book.db")
	s, err := outbox.Open(context.Background(), book)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(context.Background(), "r", Builder("r", "x", 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := os.ReadFile(book)
	if err != nil {
		t.Fatal(err)
	}
	good := text(1, "a", "b")
	for name, content := range map[string][]byte{
		"a SQLite database":                     db,
		"text whose last line has no newline":   []byte("first line\nsecond line\nno newline"),
		"text":                                  []byte("first line\nsecond line\n"),
		"one line of text, no newline":          []byte("hello"),
		"JSON lines without seq":                []byte(`{"engine_run_id":"r"}` + "\n"),
		"JSON lines without engine_run_id":      []byte(`{"seq":1}` + "\n"),
		"a JSON array":                          []byte("[1,2]\n"),
		"a torn tail that is not a line":        []byte(good + "tail"),
		"a first line that is not a line":       []byte("# journal\n" + good),
		"a last line that is not a line":        []byte(good + "# end\n"),
		"NUL bytes after a copytruncate":        append(make([]byte, 4096), good...),
		"NUL bytes at the end":                  append([]byte(good), make([]byte, 512)...),
		"a journal line with a NUL in the tail": []byte(good + `{"engine_run_id":"r","seq":3,"x":"` + "\x00"),
		"a torn tail longer than a line":        []byte(good + "{" + strings.Repeat("x", outbox.DefaultMaxLineSize)),
		"one JSON object, no newline":           []byte(`{"database":"prod","user":"admin","password":"x"}`),
		"a whole JSON object as the tail":       []byte(good + `{"database":"prod"}`),
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour).Truncate(time.Second)
		os.Chtimes(path, old, old)
		j, err := OpenFile(path)
		if err == nil {
			j.Close()
		}
		if !errors.Is(err, ErrNotJournal) {
			t.Errorf("%s: %v, want ErrNotJournal", name, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, content) {
			t.Errorf("%s: the file was changed", name)
		}
		if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
			t.Errorf("%s: modification time %v, was %v", name, st.ModTime(), old)
		}
		f, _ := os.Open(path)
		if err := flock.Exclusive(f); err != nil {
			t.Errorf("%s: the file is still locked: %v", name, err)
		}
		flock.Release(f)
	}
	if j, err := OpenFile(os.DevNull); !errors.Is(err, ErrNotJournal) {
		if err == nil {
			j.Close()
		}
		t.Errorf("%s: %v, want ErrNotJournal", os.DevNull, err)
	}
}

func TestOpenFileTakesAnEmptyFileOrANewOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	for _, path := range []string{empty, filepath.Join(dir, "new.jsonl")} {
		j, err := OpenFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := j.Append(context.Background(), "r", batch(1, "a")); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		j.Close()
	}
}

// TestAppendRefusesAFileModifiedByAnotherProgram: another program's append, a copytruncate, or a
// rewrite to the same length: the File writes nothing and says so, until it is reopened.
func TestAppendRefusesAFileModifiedByAnotherProgram(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, modify := range map[string]func(path string) error{
		"a line appended": func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(jline(3, "theirs") + "\n")
			return err
		},
		"copytruncate":   func(path string) error { return os.Truncate(path, 0) },
		"cut by a line":  func(path string) error { return os.Truncate(path, int64(len(text(1, "a")))) },
		"bytes appended": func(path string) error { return appendBytes(path, "x") },
		"renamed away and created again": func(path string) error {
			if err := os.Rename(path, path+".1"); err != nil {
				return err
			}
			return os.WriteFile(path, nil, 0o644)
		},
		"removed": func(path string) error { return os.Rename(path, path+".1") },
		"rewritten to the same length": func(path string) error {
			b, _ := os.ReadFile(path)
			return os.WriteFile(path, bytes.Replace(b, []byte(`"w":"b"`), []byte(`"w":"B"`), 1), 0o644)
		},
	} {
		j, path := openTemp(t)
		if err := j.Append(ctx, "r", batch(1, "a", "b")); err != nil {
			t.Fatal(err)
		}
		if err := modify(path); err != nil {
			t.Fatal(err)
		}
		theirs, _ := os.ReadFile(path)
		for range 2 {
			err := j.Append(ctx, "r", batch(3, "c"))
			if !errors.Is(err, ErrModified) || !errors.Is(err, outbox.ErrSinkRefused) {
				t.Errorf("%s: %v, want ErrModified", name, err)
			}
		}
		if _, err := j.LastSeq("r"); !errors.Is(err, ErrModified) {
			t.Errorf("%s: LastSeq: %v, want ErrModified", name, err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, theirs) {
			t.Errorf("%s: the file holds %q, the other program left %q", name, got, theirs)
		}
		if moved, err := os.ReadFile(path + ".1"); err == nil && string(moved) != text(1, "a", "b") {
			t.Errorf("%s: the file moved away holds %q", name, moved)
		}
	}
}

func appendBytes(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}

// noSpaceOps is a file system with room for limit bytes: a write past them stops there with ENOSPC,
// as the kernel's does.
type noSpaceOps struct {
	osOps
	limit int64
}

func (o *noSpaceOps) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	if off+int64(len(b)) <= o.limit {
		return f.WriteAt(b, off)
	}
	n, _ := f.WriteAt(b[:max(0, o.limit-off)], off)
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

func TestAWriteRefusedForLackOfSpaceIsNamedAndCutBack(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	ops := &noSpaceOps{limit: int64(len(text(1, "a"))) + 10}
	j, err := openFile(path, ops)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(context.Background(), "r", batch(1, "a")); err != nil {
		t.Fatal(err)
	}
	err = j.Append(context.Background(), "r", batch(2, "b", "c"))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("%v, want ENOSPC named", err)
	}
	if errors.Is(err, outbox.ErrSinkRefused) {
		t.Errorf("%v: a full disk is not a refusal; the relay retries", err)
	}
	if got := readFile(t, path); got != text(1, "a") {
		t.Errorf("the file holds %q after the failed write", got)
	}
	ops.limit = 1 << 20 // room again: the next append goes on where the first ended
	if err := j.Append(context.Background(), "r", batch(2, "b", "c")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != text(1, "a", "b", "c") {
		t.Errorf("the file holds %q", got)
	}
}

// noSyncOps skips fdatasync, so that fuzzing OpenFile is not bound by the disk.
type noSyncOps struct{ osOps }

func (noSyncOps) Datasync(*os.File) error { return nil }

// FuzzOpenFile: OpenFile either refuses a file with ErrNotJournal and leaves it as it was, or opens
// one whose first and last complete lines are journal lines, cutting no more than a torn tail that
// begins with '{'.
func FuzzOpenFile(f *testing.F) {
	f.Add([]byte(text(1, "a", "b") + `{"engine_run_id":"r","se`))
	f.Add([]byte("SQLite format 3\x00\x10\x00"))
	f.Add([]byte("a\nb\n"))
	f.Add([]byte(`{"engine_run_id":"\ud800","seq":1}` + "\n"))
	f.Add([]byte(text(1, "a") + "\x00\x00"))
	path := filepath.Join(f.TempDir(), "j.jsonl")
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := os.WriteFile(path, in, 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := openFile(path, noSyncOps{})
		got, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrNotJournal) {
				t.Fatalf("%v, want ErrNotJournal", err)
			}
			if !bytes.Equal(got, in) {
				t.Fatalf("a refused file was changed: %q to %q", in, got)
			}
			return
		}
		defer j.Close()
		complete := bytes.LastIndexByte(in, '\n') + 1
		if !bytes.Equal(got, in[:complete]) {
			t.Fatalf("%q opened as %q", in, got)
		}
		if torn := in[complete:]; len(torn) > 0 && (torn[0] != '{' || bytes.IndexByte(torn, 0) >= 0) {
			t.Fatalf("the torn tail %q was cut", torn)
		}
		if complete == 0 {
			return
		}
		lines := bytes.Split(got[:complete-1], []byte("\n"))
		for _, l := range [][]byte{lines[0], lines[len(lines)-1]} {
			if _, _, err := LineKey(l); err != nil || bytes.IndexByte(l, 0) >= 0 {
				t.Fatalf("opened with the line %q: %v", l, err)
			}
		}
		run, seq, _ := LineKey(lines[len(lines)-1])
		if last, err := j.LastSeq(run); err != nil || last < seq {
			t.Fatalf("LastSeq(%q) = (%d, %v), the last line is seq %d", run, last, err, seq)
		}
	})
}
