package tests

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/outbox"
)

// childEnv names the role a re-executed test binary plays; see TestMain.
const childEnv = "OUTBOX_TEST_CHILD"

var children = map[string]func() int{}

// TestMain lets a test re-execute this binary as a child process with a role (holding the writer
// lock, enqueueing until killed, …), so locks and crashes are tested across real processes.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		f, ok := children[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
			os.Exit(2)
		}
		os.Exit(f())
	}
	os.Exit(m.Run())
}

// child returns a command that re-executes this test binary in role, with extra environment.
func child(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// setup opens a fresh writable store in a temporary directory and closes it when the test ends.
func setup(t testing.TB, opts ...outbox.Option) (*outbox.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// reopen closes s and opens its database again, as the next process would: the runs s enqueued to
// are then an earlier process's, which Relay.Recover projects and forgets.
func reopen(t testing.TB, s *outbox.Store, opts ...outbox.Option) *outbox.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := outbox.Open(context.Background(), s.Path(), opts...)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// lineOf renders a small line that names its seq, the way a real builder would.
func lineOf(kind string) outbox.EventBuilder {
	return func(seq int64) ([]byte, error) {
		return fmt.Appendf(nil, `{"seq":%d,"type":%q}`, seq, kind), nil
	}
}

func constLine(b []byte) outbox.EventBuilder {
	return func(int64) ([]byte, error) { return b, nil }
}

func mustEnqueue(t testing.TB, s *outbox.Store, runID string) int64 {
	t.Helper()
	seq, err := s.EnqueueEvent(context.Background(), runID, lineOf("x"))
	if err != nil {
		t.Fatalf("EnqueueEvent(%q): %v", runID, err)
	}
	return seq
}

// allLines reads every stored line of runID through the public API.
func allLines(t testing.TB, s *outbox.Store, runID string) []outbox.EventLine {
	t.Helper()
	var out []outbox.EventLine
	after := int64(0)
	for {
		batch, err := s.PendingEvents(context.Background(), runID, after, 1000)
		if err != nil {
			t.Fatalf("PendingEvents: %v", err)
		}
		if len(batch) == 0 {
			return out
		}
		out = append(out, batch...)
		after = batch[len(batch)-1].Seq
	}
}

func seqsOf(lines []outbox.EventLine) []int64 {
	out := make([]int64, len(lines))
	for i, l := range lines {
		out[i] = l.Seq
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// rawDB opens the database file directly, for assertions the public API does not expose.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func countRows(t testing.TB, path, where string, args ...any) int {
	t.Helper()
	var n int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM events_outbox WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
