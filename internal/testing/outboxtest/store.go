// SPDX-License-Identifier: Apache-2.0

package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/outbox"
)

// ErrRender is what a test's failing builder returns, so that the test can tell its own failure from
// the store's.
var ErrRender = errors.New("render failed")

// Patient returns a context for a test's own setup and checks, whose deadline is far off. A store
// bounds a call by its operation timeout only when the call's context has no deadline, so a test of a
// short operation timeout keeps it for the calls under test while its setup (Open's migrations, the
// events it enqueues, the reads that check the outcome) cannot run out of time on a loaded machine.
func Patient(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Setup opens a fresh writable store in a temporary directory, closes it when the test ends, and
// returns it with its path.
func Setup(t testing.TB, opts ...outbox.Option) (*outbox.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(Patient(t), path, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// Reopen closes s and opens its database again, as the next process would: the runs s enqueued to
// are then an earlier process's, which Relay.Recover projects and forgets.
func Reopen(t testing.TB, s *outbox.Store, opts ...outbox.Option) *outbox.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := outbox.Open(Patient(t), s.Path(), opts...)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// LineOf renders a small line that names its seq, the way a real builder would.
func LineOf(kind string) outbox.EventBuilder {
	return func(seq int64) ([]byte, error) {
		return fmt.Appendf(nil, `{"seq":%d,"type":%q}`, seq, kind), nil
	}
}

// ConstLine is a builder that returns b whatever the seq: nil, an empty or a broken line as well as a
// good one.
func ConstLine(b []byte) outbox.EventBuilder {
	return func(int64) ([]byte, error) { return b, nil }
}

// MustEnqueue enqueues one line to runID and returns its seq, failing the test on an error.
func MustEnqueue(t testing.TB, s *outbox.Store, runID string) int64 {
	t.Helper()
	seq, err := s.EnqueueEvent(Patient(t), runID, LineOf("x"))
	if err != nil {
		t.Fatalf("EnqueueEvent(%q): %v", runID, err)
	}
	return seq
}

// AllLines reads every stored line of runID through the public API.
func AllLines(t testing.TB, s *outbox.Store, runID string) []outbox.EventLine {
	t.Helper()
	var out []outbox.EventLine
	after := int64(0)
	ctx := Patient(t)
	for {
		batch, err := s.PendingEvents(ctx, runID, after, 1000)
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

// SeqsOf is the seqs of lines, in their order.
func SeqsOf(lines []outbox.EventLine) []int64 {
	out := make([]int64, len(lines))
	for i, l := range lines {
		out[i] = l.Seq
	}
	return out
}

// SeqRange is from, from+1, …, to.
func SeqRange(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// RawDB opens the database file directly and read-only, for assertions the public API does not
// expose; it is closed when the test ends.
func RawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// RawDBRW opens the database file directly for writing, on one connection, to do what the public API
// refuses to (a foreign schema, a newer version, a broken row); it is closed when the test ends.
func RawDBRW(t testing.TB, path string) *sql.DB {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	d.SetMaxOpenConns(1)
	t.Cleanup(func() { d.Close() })
	return d
}

// CountRows counts the rows of events_outbox that match where, with args bound to its parameters.
func CountRows(t testing.TB, path, where string, args ...any) int {
	t.Helper()
	var n int
	if err := RawDB(t, path).QueryRow("SELECT count(*) FROM events_outbox WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TableNames is the set of tables and indexes of d, SQLite's own left out.
func TableNames(t testing.TB, d *sql.DB) map[string]bool {
	t.Helper()
	rows, err := d.Query(`SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		out[n] = true
	}
	return out
}
