// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/db"
)

func openConn(t *testing.T) *sqlite3.Conn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := sqlite3.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPendingReadRefusesReorderedColumns: the pending read is stepped by column number, so a SELECT
// whose columns moved must fail when it is prepared, not read one column as another.
func TestPendingReadRefusesReorderedColumns(t *testing.T) {
	c := openConn(t)
	for _, query := range []string{
		`SELECT line, seq, 0 AS to_mark FROM events_outbox`,
		`SELECT seq, line FROM events_outbox`,
	} {
		stmt, _, err := c.Prepare(query)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkColumns(stmt, pendingColumns); err == nil {
			t.Errorf("%s: accepted", query)
		}
		stmt.Close()
	}
	stmt, err := preparePending(c)
	if err != nil {
		t.Fatalf("the generated pending read: %v", err)
	}
	stmt.Close()
}

// TestPendingReadIsBoundByItsParametersNumbers: readPending binds the run, the seq to read after and
// the limit where the generated SQL numbers them, and preparePending refuses a read whose parameters
// are not those three.
func TestPendingReadIsBoundByItsParametersNumbers(t *testing.T) {
	c := openConn(t)
	for seq := int64(1); seq <= 5; seq++ {
		if err := c.Exec(fmt.Sprintf(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('r', %d, 'x')`, seq)); err != nil {
			t.Fatal(err)
		}
	}
	stmt, err := preparePending(c)
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	lines, _, err := readPending(context.Background(), c, stmt, "r", 2, 2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].Seq != 3 || lines[1].Seq != 4 {
		t.Fatalf("after 2, at most 2: got %v, want seqs 3 and 4", lines)
	}
	other, _, err := c.Prepare(`SELECT seq, line, 0 AS to_mark FROM events_outbox WHERE engine_run_id = ?1 AND seq > ?2`)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := checkParams(other, pendingParams); err == nil {
		t.Error("a pending read with two parameters: accepted")
	}
}

// TestPreparedStatementsRefuseAnotherQuery: a generated call given the wrong prepared statement fails
// instead of running that statement with its arguments.
func TestPreparedStatementsRefuseAnotherQuery(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.write(context.Background(), durable, func(w *txWriter) error {
		_, err := w.q.EventInsert(w.ctx, w.on(stmtProgressSet), db.EventInsertParams{EngineRunID: "r", Seq: 1, Line: []byte("x")})
		return err
	})
	if !errors.Is(err, errOtherQuery) {
		t.Fatalf("an insert on the progress statement: got %v, want errOtherQuery", err)
	}
	if n, err := s.EventsUsed(context.Background(), "r"); err != nil || n {
		t.Fatalf("EventsUsed after the refused insert: %v, %v; want false", n, err)
	}
}

// TestARefusedInsertLeavesNoLargeLineBehind: a large line is stored before its row; when the row's
// insert fails but the transaction goes on to commit (a group's other calls, the caller's own writes
// around EnqueueTx), the line must not stay behind with no row to drop it.
func TestARefusedInsertLeavesNoLargeLineBehind(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(t.TempDir(), "book.db"), WithGroupCommit(group))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`CREATE TRIGGER refuse_seq_2 BEFORE INSERT ON events_outbox
					WHEN NEW.seq = 2 BEGIN SELECT RAISE(ABORT, 'refused'); END`)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			large := func(int64) ([]byte, error) { return bytes.Repeat([]byte("x"), 4*spillOver), nil }
			if _, err := s.EnqueueEvent(ctx, "r", large); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnqueueEvent(ctx, "r", large); err == nil {
				t.Fatal("the refused insert succeeded")
			}
			// The same through EnqueueTx, in a transaction the caller commits all the same.
			err = s.WriteTx(ctx, func(tx *sql.Tx) error {
				if _, err := s.EnqueueTx(ctx, tx, "r", large); err == nil {
					t.Error("the refused insert succeeded inside WriteTx")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var lines int
			if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM events_lines`).Scan(&lines); err != nil {
				t.Fatal(err)
			}
			if lines != 1 {
				t.Fatalf("events_lines holds %d lines, want 1 (seq 1's)", lines)
			}
		})
	}
}
