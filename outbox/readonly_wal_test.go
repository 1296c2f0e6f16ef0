// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/dirstate"
)

// sharedDir is a directory that another user can read (t.TempDir is its owner's alone), removed
// after the test.
func sharedDir(t *testing.T) (base, dir string) {
	t.Helper()
	base, err := os.MkdirTemp("", "outbox-ro-")
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(base, "book")
	t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return base, dir
}

// runningEngine opens a book at dir with lines of runs a and b committed to its WAL, and leaves it
// open.
func runningEngine(t *testing.T, dir string) (*Store, string) {
	t.Helper()
	ctx := context.Background()
	path := closedBook(t, dir)
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range 3 {
		if _, err := s.EnqueueEvent(ctx, "a", lineFor("a", 10+i)); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(path + "-wal"); err != nil || st.Size() == 0 {
		t.Fatalf("the engine's -wal: %v", err)
	}
	return s, path
}

// crashedBook leaves in dir what an engine killed with the book open leaves: the database, its -wal
// holding the last commits, and its -shm (removed when withShm is false), with no process attached.
// It copies a running engine's files between commits, which is what a kill leaves on disk.
func crashedBook(t *testing.T, dir string, withShm bool) string {
	t.Helper()
	_, live := runningEngine(t, t.TempDir())
	path := filepath.Join(dir, "book.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if suffix == "-shm" && !withShm {
			continue
		}
		dirstate.CopyFile(t, live+suffix, path+suffix, 0o644)
	}
	return path
}

// wantRead is what readAll returns for the books above: the closed book's lines and the three the
// engine committed after it.
func wantRead(t *testing.T) string {
	t.Helper()
	got, err := readAll(context.Background(), crashedBook(t, t.TempDir(), true))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "a last 8 lines 8") {
		t.Fatalf("the engine's commits are not read:\n%s", got)
	}
	return got
}

func TestAReaderThatCannotWriteTheWALOrTheSHMSeesARunningEnginesCommits(t *testing.T) {
	base, dir := sharedDir(t)
	_, path := runningEngine(t, dir)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Chmod(path+suffix, 0o444) // binds the reader when it is this user; nobody otherwise
	}
	os.Chmod(dir, 0o555)
	want, err := readAll(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(want, "a last 8 lines 8") {
		t.Fatalf("the engine's commits are not read:\n%s", want)
	}
	cmd := asUnprivileged(t, base, "TestReadOnlyChild")
	cmd.Env = append(os.Environ(), "OUTBOX_RO_BOOK="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reader: %v\n%s", err, out)
	}
	if got := strings.TrimPrefix(string(out), "READ\n"); !strings.HasPrefix(got, want) {
		t.Errorf("reader read:\n%s\nwant:\n%s", got, want)
	}
}

func TestAReaderThatCannotWriteACrashedBookReadsItsLastCommitAndChangesNothing(t *testing.T) {
	want := wantRead(t)
	for _, withShm := range []bool{true, false} {
		t.Run(fmt.Sprintf("with the -shm %v", withShm), func(t *testing.T) {
			base, dir := sharedDir(t)
			path := crashedBook(t, dir, withShm)
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Chmod(path+suffix, 0o444)
			}
			os.Chmod(dir, 0o555)
			before := dirstate.Snapshot(t, dir)
			cmd := asUnprivileged(t, base, "TestReadOnlyChild")
			cmd.Env = append(os.Environ(), "OUTBOX_RO_BOOK="+path)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("reader: %v\n%s", err, out)
			}
			if got := strings.TrimPrefix(string(out), "READ\n"); !strings.HasPrefix(got, want) {
				t.Errorf("reader read:\n%s\nwant:\n%s", got, want)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Errorf("the directory changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestReadingACrashedBookLeavesEveryFileAsItWas reads as this user, who may write every file (root
// included): nothing is written or created all the same.
func TestReadingACrashedBookLeavesEveryFileAsItWas(t *testing.T) {
	t.Parallel()
	want := wantRead(t)
	for _, withShm := range []bool{true, false} {
		dir := t.TempDir()
		path := crashedBook(t, dir, withShm)
		before := dirstate.Snapshot(t, dir)
		for range 2 {
			got, err := readAll(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("with the -shm %v: read:\n%s\nwant:\n%s", withShm, got, want)
			}
		}
		d, err := OpenReadOnlyDB(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := d.QueryRow(`SELECT count(*) FROM events_outbox`).Scan(&n); err != nil || n != 9 {
			t.Errorf("with the -shm %v: OpenReadOnlyDB counts %d rows, %v; want 9", withShm, n, err)
		}
		d.Close()
		if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("with the -shm %v: the directory changed (-before +after):\n%s", withShm, diff)
		}
	}
}

// TestAReadOfACrashedBookKeepsItsSnapshotWhileAnEngineStartsOnIt: a read transaction on a crashed
// book goes on reading what it began with while an engine recovers the book, commits and tries to
// checkpoint; without a -shm, which the engine creates, the read fails with ErrBookOpened instead.
func TestAReadOfACrashedBookKeepsItsSnapshotWhileAnEngineStartsOnIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, withShm := range []bool{true, false} {
		path := crashedBook(t, t.TempDir(), withShm)
		ro, err := OpenReadOnly(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := ro.r.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		count := func() (int, error) {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT count(*), sum(length(line)) FROM events_outbox`).Scan(&n, new(int))
			return n, err
		}
		if n, err := count(); err != nil || n != 9 {
			t.Fatalf("with the -shm %v: %d rows, %v; want 9", withShm, n, err)
		}
		w, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("with the -shm %v: an engine cannot start beside the reader: %v", withShm, err)
		}
		for i := range 50 {
			if _, err := w.EnqueueEvent(ctx, "c", lineFor("c", i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.w.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
			t.Fatal(err)
		}
		// The count may come from the connection's cache; the progress table, not read before,
		// comes from the files.
		n, err := count()
		var m int
		perr := tx.QueryRowContext(ctx, `SELECT count(*) FROM outbox_progress`).Scan(&m)
		switch {
		case withShm && (err != nil || n != 9 || perr != nil):
			t.Errorf("with the -shm: after the engine's commits the read gives %d rows, %v, %v; want its 9", n, err, perr)
		case !withShm && ((err != nil && !errors.Is(err, ErrBookOpened)) || (err == nil && n != 9)):
			t.Errorf("without a -shm: after the engine's commits the read gives %d rows, %v; want its 9 or ErrBookOpened", n, err)
		case !withShm && !errors.Is(perr, ErrBookOpened):
			t.Errorf("without a -shm: a read of pages not yet read after the engine's commits: %v; want ErrBookOpened", perr)
		}
		tx.Rollback()
		if lines, err := ro.PendingEvents(ctx, "c", 0, 100); err != nil || len(lines) != 50 {
			t.Errorf("with the -shm %v: the next read gives %d of the engine's lines, %v; want 50", withShm, len(lines), err)
		}
		ro.Close()
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAReaderThatCannotWriteTheSHMNeverReadsAMixOfTwoCommits: a reader that reads the engine's -shm
// read-only reads, again and again, while the engine commits, checkpoints and restarts its WAL; every
// read is of one commit: the run's lines are numbered 1 to their count, each line its own.
func TestAReaderThatCannotWriteTheSHMNeverReadsAMixOfTwoCommits(t *testing.T) {
	ctx := context.Background()
	base, dir := sharedDir(t)
	s, path := runningEngine(t, dir)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Chmod(path+suffix, 0o444)
	}
	done := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		for i := 0; i < 20000; i++ {
			select {
			case <-done:
				writerErr <- nil
				return
			default:
			}
			if _, err := s.EnqueueEvent(ctx, "w", lineFor("w", i)); err != nil {
				writerErr <- err
				return
			}
			if i%16 == 0 {
				if _, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
					writerErr <- err
					return
				}
			}
		}
		writerErr <- nil
	}()
	cmd := asUnprivileged(t, base, "TestConsistentReadsChild")
	cmd.Env = append(os.Environ(), "OUTBOX_RO_BOOK="+path)
	out, err := cmd.CombinedOutput()
	close(done)
	if werr := <-writerErr; werr != nil {
		t.Fatal(werr)
	}
	if err != nil || !strings.Contains(string(out), "CONSISTENT\n") {
		t.Fatalf("reader: %v\n%s", err, out)
	}
}

// TestConsistentReadsChild is the reader process of the test above.
func TestConsistentReadsChild(t *testing.T) {
	path := os.Getenv("OUTBOX_RO_BOOK")
	if path == "" {
		t.Skip("run by TestAReaderThatCannotWriteTheSHMNeverReadsAMixOfTwoCommits")
	}
	ctx := context.Background()
	if f, err := os.OpenFile(path+"-shm", os.O_RDWR, 0); err == nil {
		f.Close()
		t.Fatal("the reader can write the -shm: the test proves nothing")
	}
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	seen := int64(0)
	for range 100 {
		// The run's figures, and its last lines, each as of one commit.
		runs, err := collect(ro.AllRuns(ctx))
		if err != nil {
			t.Fatal(err)
		}
		var w RunStats
		for _, r := range runs {
			if r.RunID == "w" {
				w = r
			}
		}
		if w.Lines != w.LastSeq || w.LastSeq < seen {
			t.Fatalf("run w: %d lines, last seq %d, after last seq %d", w.Lines, w.LastSeq, seen)
		}
		seen = w.LastSeq
		after := max(0, seen-20)
		lines, err := ro.PendingEvents(ctx, "w", after, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(lines)) < seen-after {
			t.Fatalf("%d lines after seq %d, want at least %d", len(lines), after, seen-after)
		}
		for i, l := range lines {
			seq := after + int64(i) + 1
			want, _ := lineFor("w", int(seq-1))(seq)
			if l.Seq != seq || string(l.Line) != string(want) {
				t.Fatalf("line %d after seq %d: seq %d %s, want seq %d %s", i, after, l.Seq, l.Line, seq, want)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no line of the engine's was read")
	}
	fmt.Println("CONSISTENT")
}
