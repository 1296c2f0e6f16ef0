// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/inbox/internal/db"
	"github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	queryPlans["RunsCount"] = struct {
		sql    string
		want   []string
		reason string
	}{db.RunsCount, []string{"SCAN inbox_runs"},
		"counts every run, one row each, for stats and metrics; no query of Apply runs it"}
}

// writeJournal writes lines as a journal file, each with its newline.
func writeJournal(t testing.TB, path string, ls [][]byte) {
	t.Helper()
	var b bytes.Buffer
	for _, l := range ls {
		b.Write(l)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after a minute (a hang, not a timing
// assertion).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("still not so after a minute")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func allRuns(t testing.TB, in *inbox.Inbox) []inbox.Run {
	t.Helper()
	var out []inbox.Run
	for r, err := range in.AllRuns(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// consumerState is what a reader of the inbox sees: positions, quarantines, sources.
func consumerState(t testing.TB, in *inbox.Inbox) string {
	t.Helper()
	ctx := context.Background()
	var b bytes.Buffer
	for _, r := range allRuns(t, in) {
		fmt.Fprintf(&b, "run %q at %d\n", r.RunID, r.Position)
	}
	n, err := in.RunCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "%d runs\n", n)
	for _, q := range quarantined(t, in) {
		fmt.Fprintf(&b, "quarantined %q %s %d %d\n", q.RunID, q.Reason, q.Expected, q.Got)
	}
	srcs, err := in.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srcs {
		fmt.Fprintf(&b, "source %q %x\n", s.Name, s.Position)
	}
	return b.String()
}

// consumerDB makes a consumer database with two runs, one quarantined for a gap, and a file source,
// then closes it.
func consumerDB(t testing.TB) (dbPath, jPath string) {
	t.Helper()
	in, dbPath := setup(t)
	jPath = filepath.Join(filepath.Dir(dbPath), "journal.jsonl")
	writeJournal(t, jPath, append(lines("a", 1, 3), line("b", 1), line("b", 3)))
	if _, err := in.ApplyFile(context.Background(), jPath, insertHandler); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	return dbPath, jPath
}

func TestAReadOnlyInboxReadsWhatARunningConsumerCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath, jPath := consumerDB(t)
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ro, err := inbox.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatalf("OpenReadOnly beside a running consumer: %v", err)
	}
	defer ro.Close()
	if diff := cmp.Diff(consumerState(t, in), consumerState(t, ro)); diff != "" {
		t.Errorf("the read-only inbox reads (-consumer +read-only):\n%s", diff)
	}
	// The consumer goes on, following the file, and commits while the reader reads.
	f, err := os.OpenFile(jPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(line("c", 1), '\n'))
	f.Close()
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(fctx, jPath, insertHandler) }()
	waitFor(t, func() bool { return position(t, ro, "c") == 1 })
	if got := position(t, ro, "a"); got != 3 {
		t.Errorf("run a at %d beside FollowFile, want 3", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if diff := cmp.Diff(consumerState(t, in), consumerState(t, ro)); diff != "" {
		t.Errorf("after FollowFile (-consumer +read-only):\n%s", diff)
	}
	// And after the consumer closed, from the database file alone.
	want := consumerState(t, in)
	in.Close()
	if diff := cmp.Diff(want, consumerState(t, ro)); diff != "" {
		t.Errorf("after the consumer closed (-consumer +read-only):\n%s", diff)
	}
}

func TestAReadOnlyInboxLeavesAClosedDatabasesDirectoryAsItFoundIt(t *testing.T) {
	t.Parallel()
	dbPath, _ := consumerDB(t)
	dir := filepath.Dir(dbPath)
	before := dirstate.Snapshot(t, dir)
	ro, err := inbox.OpenReadOnly(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	state := consumerState(t, ro)
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(dbPath + suffix); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a read-only inbox made %s: %v", suffix, err)
		}
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
	if state == "" {
		t.Error("nothing was read")
	}
}

func TestEveryWriteOfAReadOnlyInboxFailsWithErrReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath, jPath := consumerDB(t)
	f, _ := os.OpenFile(jPath, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(append(line("a", 4), '\n'))
	f.Close()
	dir := filepath.Dir(dbPath)
	before := dirstate.Snapshot(t, dir)
	ro, err := inbox.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, applyErr := ro.Apply(ctx, [][]byte{line("a", 4)}, insertHandler)
	_, fileErr := ro.ApplyFile(ctx, jPath, insertHandler)
	_, fromErr := ro.ApplyFrom(ctx, "file:/x", nil, []byte("p"), nil, insertHandler)
	followCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for name, err := range map[string]error{
		"Apply":      applyErr,
		"ApplyFile":  fileErr,
		"ApplyFrom":  fromErr,
		"FollowFile": ro.FollowFile(followCtx, jPath, insertHandler),
		"WriteTx":    ro.WriteTx(ctx, func(*sql.Tx) error { return nil }),
		"Release":    ro.Release(ctx, "b"),
		"AcceptGap":  ro.AcceptGap(ctx, "b", "lost"),
	} {
		if !errors.Is(err, inbox.ErrReadOnly) {
			t.Errorf("%s on a read-only inbox: %v, want ErrReadOnly", name, err)
		}
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
	if got := position(t, ro, "a"); got != 3 {
		t.Errorf("run a at %d after refused writes, want 3", got)
	}
}

func TestOpenReadOnlyRefusesWhatIsNotAnInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.db")
	d, err := sql.Open("sqlite3", "file:"+plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	book := filepath.Join(dir, "book.db")
	s, err := outbox.Open(ctx, book)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	newer, _ := consumerDB(t)
	d, err = sql.Open("sqlite3", "file:"+newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO `+migrations.TableName+` (version_id, is_applied) VALUES (?, 1)`, migrations.Latest()+1); err != nil {
		t.Fatal(err)
	}
	d.Close()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("dear diary\n"), 0o644)
	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"a missing file", filepath.Join(dir, "missing.db"), fs.ErrNotExist},
		{"a database without an inbox", plain, inbox.ErrNotInbox},
		{"a book", book, inbox.ErrOutboxDatabase},
		{"an inbox of a newer release", newer, migrations.ErrSchemaMismatch},
		{"a text file", text, nil},
	} {
		before := dirstate.Snapshot(t, dir)
		in, err := inbox.OpenReadOnly(ctx, tc.path)
		if err == nil {
			in.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("%s: the directory changed (-before +after):\n%s", tc.name, diff)
		}
	}
}

func TestAllRunsListsEveryRunInPages(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	var ls [][]byte
	for i := range 2345 {
		ls = append(ls, line(fmt.Sprintf("run-%05d", i), 1))
	}
	mustApply(t, in, ls)
	runs := allRuns(t, in)
	if len(runs) != len(ls) {
		t.Fatalf("AllRuns listed %d runs, want %d", len(runs), len(ls))
	}
	for i, r := range runs {
		if want := fmt.Sprintf("run-%05d", i); r.RunID != want || r.Position != 1 || r.LastApply.IsZero() {
			t.Fatalf("run %d: %+v, want %s at 1", i, r, want)
		}
	}
	if n, err := in.RunCount(context.Background()); err != nil || n != int64(len(ls)) {
		t.Errorf("RunCount: %d, %v; want %d", n, err, len(ls))
	}
	// A consumer that stops early stops the listing.
	n := 0
	for range in.AllRuns(context.Background()) {
		if n++; n == 3 {
			break
		}
	}
}
