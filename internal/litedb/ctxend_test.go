// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
)

// openWriter opens a writer on a new database.
func openWriter(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db.sqlite")
	w, err := OpenWriter(path, Config{BusyTimeout: 10 * time.Second}, nil, "FULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// SQLite's SQLITE_INTERRUPT, all a statement its context ended reports, gets the context's error
// joined; another error of the caller's own code is returned as it is, even after ctx ended.
func TestAnInterruptedStatementsErrorWrapsItsContextsErrorAndNoOtherErrorDoes(t *testing.T) {
	t.Parallel()
	w := openWriter(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	passed, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, end := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"cancelled", cancelled, context.Canceled}, {"past its deadline", passed, context.DeadlineExceeded}} {
		conn, err := w.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var interrupted error
		conn.Raw(func(dc any) error {
			c := dc.(interface{ Raw() *sqlite3.Conn }).Raw()
			old := c.SetInterrupt(end.ctx)
			defer c.SetInterrupt(old)
			interrupted = c.Exec(`SELECT 1`)
			return nil
		})
		conn.Close()
		if !errors.Is(interrupted, sqlite3.INTERRUPT) {
			t.Fatalf("%s: the statement failed with %v, want SQLITE_INTERRUPT", end.name, interrupted)
		}
		if err := Interrupted(end.ctx, interrupted); !errors.Is(err, end.want) || !errors.Is(err, sqlite3.INTERRUPT) {
			t.Errorf("%s: Interrupted: %v, want the context's error and the driver's", end.name, err)
		}
		own := errors.New("the caller's own")
		if err := Interrupted(end.ctx, own); err != own {
			t.Errorf("%s: Interrupted of an error not SQLite's interrupt: %v, want it as it is", end.name, err)
		}
		if err := Interrupted(end.ctx, nil); err != nil {
			t.Errorf("%s: Interrupted(nil): %v", end.name, err)
		}
	}
	if err := Interrupted(context.Background(), sqlite3.INTERRUPT); err != sqlite3.INTERRUPT {
		t.Errorf("Interrupted with a context that has not ended: %v, want the driver's error as it is", err)
	}
}
