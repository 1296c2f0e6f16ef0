// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/outbox"
)

// otherCtx is a context of the inner call's own. Its deadline only bounds how long the code before
// the check would have waited for the writer; the call must fail at once, well before it, and the
// assertion is on the error, never on the time taken.
func otherCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inner is every call that writes, made with ctx.
func innerWrites(in *inbox.Inbox, ctx context.Context) map[string]func() error {
	return map[string]func() error{
		"Apply": func() error { _, err := in.Apply(ctx, lines("inner", 1, 1), insertHandler); return err },
		"ApplyFrom": func() error {
			_, err := in.ApplyFrom(ctx, "src", nil, []byte("1"), lines("inner", 1, 1), insertHandler)
			return err
		},
		"WriteTx": func() error { return in.WriteTx(ctx, func(*sql.Tx) error { return nil }) },
		"Release": func() error { return in.Release(ctx, "q") },
	}
}

func TestACallThatWritesFromInsideWriteTxWithAnotherContextFailsAtOnce(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	for name, call := range innerWrites(in, otherCtx(t)) {
		t.Run(name, func(t *testing.T) {
			var inner error
			err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
				inner = call()
				_, err := tx.Exec(`INSERT INTO applied (run, seq, line) VALUES (?, 1, 'x')`, name)
				return err
			})
			if err != nil {
				t.Fatalf("the outer WriteTx: %v", err)
			}
			if !errors.Is(inner, inbox.ErrCallInsideTx) || errors.Is(inner, inbox.ErrInHandler) {
				t.Fatalf("%s inside WriteTx: %v, want ErrCallInsideTx", name, inner)
			}
			if !strings.Contains(inner.Error(), "wait for itself") {
				t.Errorf("%q does not say why", inner)
			}
		})
	}
	// Nothing of the refused calls was stored; the outer transactions were.
	if p, err := in.Position(context.Background(), "inner"); err != nil || p != 0 {
		t.Errorf("position of the inner run: %d, %v", p, err)
	}
}

func TestACallThatWritesFromInsideAHandlerWithAnotherContextFailsAtOnce(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	for name, call := range innerWrites(in, otherCtx(t)) {
		t.Run(name, func(t *testing.T) {
			var inner error
			_, err := in.Apply(context.Background(), lines("outer-"+name, 1, 1), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				inner = call()
				return insertHandler(ctx, tx, ev)
			})
			if err != nil {
				t.Fatalf("the outer Apply: %v", err)
			}
			if !errors.Is(inner, inbox.ErrCallInsideTx) || !errors.Is(inner, inbox.ErrInHandler) {
				t.Fatalf("%s inside a handler: %v, want ErrCallInsideTx and ErrInHandler", name, inner)
			}
			if !strings.Contains(inner.Error(), "handler") || !strings.Contains(inner.Error(), "wait for itself") {
				t.Errorf("%q does not say why", inner)
			}
		})
	}
}

func TestWritesFromOtherGoroutinesDuringAWriteTxWaitForItAndAreNotRefused(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := in.Apply(context.Background(), lines("r", 1, 1), insertHandler)
			errs <- err
		}()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatalf("Apply from another goroutine: %v", err)
	}
}

func TestOpenOnABookAnEngineHoldsSaysAnEngineHoldsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = inbox.Open(ctx, path)
	if !errors.Is(err, inbox.ErrLocked) || !errors.Is(err, inbox.ErrOutboxDatabase) {
		t.Fatalf("Open of a book an engine holds: %v, want ErrLocked and ErrOutboxDatabase", err)
	}
	if msg := err.Error(); strings.Contains(msg, "another inbox") || !strings.Contains(msg, "outbox engine") || !strings.Contains(msg, "book") {
		t.Errorf("%q does not name the holder", msg)
	}
}

func TestReadTxReadsOneSnapshotWithoutWaitingForARunningApply(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 2))
	ctx := context.Background()
	inHandler, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := in.Apply(ctx, lines("r", 3, 3), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			if err := insertHandler(ctx, tx, ev); err != nil {
				return err
			}
			close(inHandler)
			<-release
			return nil
		})
		done <- err
	}()
	<-inHandler
	// The Apply holds the writer, in the middle of its transaction, until the read is over.
	var n int
	err := in.ReadTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM applied`).Scan(&n)
	})
	close(release)
	if err != nil || n != 2 {
		t.Fatalf("ReadTx beside a running Apply: %d rows, %v; want the 2 committed", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err = in.ReadTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq, line) VALUES ('w', 1, 'x')`)
		return err
	})
	if err == nil {
		t.Error("a write inside ReadTx succeeded")
	}
	// Inside WriteTx it reads what is committed, and does not wait for the writer fn holds.
	err = in.WriteTx(ctx, func(wtx *sql.Tx) error {
		return in.ReadTx(otherCtx(t), func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM applied`).Scan(&n)
		})
	})
	if err != nil || n != 3 {
		t.Errorf("ReadTx inside WriteTx: %d rows, %v", n, err)
	}
	if err := in.ReadTx(ctx, nil); err == nil {
		t.Error("ReadTx with a nil function succeeded")
	}
}
