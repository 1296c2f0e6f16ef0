// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/internal/dirstate"
	"github.com/textmachine/outbox/internal/litedb"
)

// closedBook makes a book with two runs, one of them projected, and closes it: no -wal, no -shm.
func closedBook(t *testing.T, dir string) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(dir, "book.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := s.EnqueueEvent(ctx, "a", lineFor("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.EnqueueOnce(ctx, "b", "k", lineFor("b", 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func lineFor(run string, i int) EventBuilder {
	return func(seq int64) ([]byte, error) {
		return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"i":%d}`, run, seq, i), nil
	}
}

// readAll is what every read-only command does: every kind of read the store has.
func readAll(ctx context.Context, path string) (string, error) {
	s, err := OpenReadOnly(ctx, path)
	if err != nil {
		return "", err
	}
	defer s.Close()
	runs, err := s.Runs(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "%s last %d lines %d projected %d\n", r.RunID, r.LastSeq, r.Lines, r.Projected)
		lines, err := s.PendingEvents(ctx, r.RunID, 0, 100)
		if err != nil {
			return "", err
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "%d %s\n", l.Seq, l.Line)
		}
	}
	keys, err := s.AnnouncedOnceKeys(ctx)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "ledger %d\n", len(keys))
	return b.String(), nil
}

func TestOpenReadOnlyLeavesAClosedBooksDirectoryAsItFoundIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := closedBook(t, dir)
	before := dirstate.Snapshot(t, dir)
	if _, ok := before["book.db-wal"]; ok {
		t.Fatal("the closed book still has a -wal")
	}
	got, err := readAll(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "a last 5 lines 5") || !strings.Contains(got, "b last 1 lines 1") {
		t.Errorf("read:\n%s", got)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
}

// TestOpenReadOnlyWorksInADirectoryTheReaderCannotWrite reads a closed book from another process that
// cannot write the directory: as the unprivileged user nobody when the test runs as root (to whom
// permissions do not apply), otherwise as this user with the directory made read-only.
func TestOpenReadOnlyWorksInADirectoryTheReaderCannotWrite(t *testing.T) {
	base, err := os.MkdirTemp("", "outbox-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(base, "book"), 0o755); os.RemoveAll(base) })
	dir := filepath.Join(base, "book")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := closedBook(t, dir)
	want, err := readAll(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{base, dir} {
		os.Chmod(p, 0o555)
	}
	os.Chmod(path, 0o444)
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
}

// TestReadOnlyChild is the reader process of the test above.
func TestReadOnlyChild(t *testing.T) {
	path := os.Getenv("OUTBOX_RO_BOOK")
	if path == "" {
		t.Skip("run by TestOpenReadOnlyWorksInADirectoryTheReaderCannotWrite")
	}
	if f, err := os.Create(filepath.Join(filepath.Dir(path), "probe")); err == nil {
		f.Close()
		t.Fatal("the reader can write the directory: the test proves nothing")
	}
	got, err := readAll(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Print("READ\n" + got)
}

// asUnprivileged returns a command running this test binary's test named run, as nobody when this
// process is root. The binary is copied into base, which nobody can read.
func asUnprivileged(t *testing.T, base, run string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "reader.test")
	os.Chmod(base, 0o755)
	dirstate.CopyFile(t, exe, bin, 0o755)
	cmd := exec.Command(bin, "-test.run=^"+run+"$", "-test.count=1")
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return cmd
}

// TestAReadOnlyStoreFollowsAnEngineThatStartsAndStops: one read-only store, open the whole time, reads
// a closed book, then the commits of an engine that opened it, then the book after the engine closed.
func TestAReadOnlyStoreFollowsAnEngineThatStartsAndStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := closedBook(t, dir)
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	last := func() int64 {
		t.Helper()
		lines, err := ro.PendingEvents(ctx, "a", 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return lines[len(lines)-1].Seq
	}
	if got := last(); got != 5 {
		t.Fatalf("closed book: last seq %d, want 5", got)
	}
	w, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("an engine cannot open the book beside a reader: %v", err)
	}
	for i := range 3 {
		if _, err := w.EnqueueEvent(ctx, "a", lineFor("a", i)); err != nil {
			t.Fatal(err)
		}
		if got := last(); got != int64(6+i) {
			t.Errorf("beside the engine: last seq %d, want %d", got, 6+i)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := last(); got != 8 {
		t.Errorf("after the engine closed: last seq %d, want 8", got)
	}
	ro.Close()
	names := []string{}
	for n := range dirstate.Snapshot(t, dir) {
		names = append(names, n)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{"book.db"}, names); diff != "" {
		t.Errorf("files left (-want +got):\n%s", diff)
	}
}

// TestAReadThatMeetsAStartingEngineFailsWithErrBookOpened: a read that began on a closed book does not
// go on reading pages once an engine has opened it, and the same read again succeeds.
func TestAReadThatMeetsAStartingEngineFailsWithErrBookOpened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := closedBook(t, t.TempDir())
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tx, err := ro.r.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	w, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = tx.QueryRowContext(ctx, `SELECT count(*) FROM events_outbox`).Scan(&n)
	if !errors.Is(err, ErrBookOpened) {
		t.Errorf("read after an engine opened the book: %v, want ErrBookOpened", err)
	}
	tx.Rollback()
	if lines, err := ro.PendingEvents(ctx, "a", 0, 10); err != nil || len(lines) != 5 {
		t.Errorf("the same read again: %d lines, %v", len(lines), err)
	}
}

func TestOpenReadOnlyDBReadsABookOfAnyVersionAndCreatesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "other.db")
	w, err := litedb.Open(path, "", litedb.Config{}, nil, func(c *sqlite3.Conn) error { return c.Exec("PRAGMA journal_mode=WAL") })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`CREATE TABLE t (x); INSERT INTO t VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	w.Close()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("not a database\n"), 0o644)
	before := dirstate.Snapshot(t, dir)

	d, err := OpenReadOnlyDB(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := d.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 2 {
		t.Errorf("count = %d, %v; want 2", n, err)
	}
	if _, err := d.ExecContext(ctx, `INSERT INTO t VALUES (3)`); err == nil {
		t.Error("a write through the read-only database succeeded")
	}
	d.Close()
	if _, err := OpenReadOnlyDB(ctx, text); err == nil {
		t.Error("OpenReadOnlyDB accepted a text file")
	}
	if _, err := OpenReadOnlyDB(ctx, filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
}
