// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/inbox"
)

// setup opens an inbox in a temporary directory with a consumer table "applied" that the handler
// from insertHandler writes one row per line into.
func setup(t testing.TB, opts ...inbox.Option) (*inbox.Inbox, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "consumer.db")
	in, err := inbox.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	err = in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE IF NOT EXISTS applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return in, path
}

// insertHandler writes each event into the consumer's table.
func insertHandler(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq, line) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, ev.Line)
	return err
}

// line renders a journal line of run and seq.
func line(run string, seq int64, extra ...string) []byte {
	body := ""
	if len(extra) > 0 {
		body = extra[0]
	}
	return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"t","data":%q}`, run, seq, body)
}

// lines renders run's lines from..to.
func lines(run string, from, to int64) [][]byte {
	var out [][]byte
	for s := from; s <= to; s++ {
		out = append(out, line(run, s))
	}
	return out
}

// rawDB opens the consumer database read-only beside the inbox, to look at what is stored.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	d, err := driver.Open("file:" + path + "?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func count(t testing.TB, d *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func mustApply(t testing.TB, in *inbox.Inbox, ls [][]byte) inbox.Report {
	t.Helper()
	rep, err := in.Apply(context.Background(), ls, insertHandler)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func position(t testing.TB, in *inbox.Inbox, run string) int64 {
	t.Helper()
	p, err := in.Position(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func insertNothing(context.Context, *sql.Tx, inbox.Event) error { return nil }

// rawDBRW opens the consumer database for writing, for a test that changes it behind the inbox.
func rawDBRW(t testing.TB, path string) *sql.DB {
	t.Helper()
	d, err := driver.Open("file:" + path + "?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// storedDigest reads the digest of a run's line seq as the inbox stores it (rows of consecutive
// digests from first_seq on), and false when no row holds it.
func storedDigest(t testing.TB, d *sql.DB, run string, seq int64) ([]byte, bool) {
	t.Helper()
	var got []byte
	err := d.QueryRow(`SELECT substr(digests, (?2 - first_seq) * 32 + 1, 32) FROM inbox_digests
		WHERE engine_run_id = ?1 AND first_seq <= ?2 AND ?2 < first_seq + length(digests) / 32`, run, seq).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("the digest of run %q seq %d: %v", run, seq, err)
	}
	return got, true
}

// digestsKept counts the digests stored for a run ("" for every run), zeros included.
func digestsKept(t testing.TB, d *sql.DB, run string) int {
	t.Helper()
	return count(t, d, `SELECT CAST(total(length(digests)) AS INTEGER) / 32 FROM inbox_digests WHERE ?1 = '' OR engine_run_id = ?1`, run)
}

// reopen closes in and opens path again with opts.
func reopen(t *testing.T, in *inbox.Inbox, path string, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	in2, err := inbox.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in2.Close() })
	return in2
}

func applyOne(t *testing.T, in *inbox.Inbox, l []byte) inbox.Report {
	t.Helper()
	rep, err := in.Apply(context.Background(), [][]byte{l}, insertNothing)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// applyOnce applies ls with insertHandler and checks each line applied exactly once.
func appliedExactlyOnce(t *testing.T, in *inbox.Inbox, path string, ls [][]byte) {
	t.Helper()
	if _, err := in.Apply(context.Background(), ls, insertHandler); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != len(ls) {
		t.Errorf("%d rows after the next call, want %d", n, len(ls))
	}
}
