// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// storeWrites are the store's write methods, each called as a nested caller would.
var storeWrites = map[string]func(ctx context.Context, s *outbox.Store) error{
	"EnqueueEvent": func(ctx context.Context, s *outbox.Store) error {
		_, err := s.EnqueueEvent(ctx, "inner", outboxtest.LineOf("x"))
		return err
	},
	"EnqueueOnce": func(ctx context.Context, s *outbox.Store) error {
		_, _, err := s.EnqueueOnce(ctx, "inner", "k", outboxtest.LineOf("x"))
		return err
	},
	"EnqueueEvents": func(ctx context.Context, s *outbox.Store) error {
		_, err := s.EnqueueEvents(ctx, "inner", []outbox.EventBuilder{outboxtest.LineOf("x")})
		return err
	},
	"WriteTx": func(ctx context.Context, s *outbox.Store) error {
		return s.WriteTx(ctx, func(*sql.Tx) error { return nil })
	},
	"MarkAnnounced": func(ctx context.Context, s *outbox.Store) error {
		return s.MarkAnnounced(ctx, "inner", map[int64]string{1: "k"})
	},
	"ForgetEvents": func(ctx context.Context, s *outbox.Store) error {
		_, err := s.ForgetEvents(ctx, "inner")
		return err
	},
}

func TestAWriteCalledFromInsideWriteTxFailsAtOnceSayingItIsACallFromInsideATransaction(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		for name, call := range storeWrites {
			t.Run(fmt.Sprintf("%s/group=%v", name, group), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
				var inner error
				err := s.WriteTx(ctx, func(tx *sql.Tx) error {
					inner = call(ctx, s)
					_, err := s.EnqueueTx(ctx, tx, "outer", outboxtest.LineOf("y"))
					return err
				})
				if !errors.Is(inner, outbox.ErrCallInsideTx) {
					t.Fatalf("the nested call: %v; want ErrCallInsideTx", inner)
				}
				if err != nil {
					t.Fatalf("WriteTx: %v", err)
				}
				// The store goes on, from the same goroutine, now that it holds nothing.
				if err := call(ctx, s); errors.Is(err, outbox.ErrCallInsideTx) {
					t.Fatalf("after WriteTx: %v", err)
				}
			})
		}
	}
}

func TestABuilderThatCallsTheStoreFailsAtOnceSayingItIsACallFromInsideATransaction(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		for name, call := range storeWrites {
			t.Run(fmt.Sprintf("%s/group=%v", name, group), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
				_, err := s.EnqueueEvent(ctx, "outer", func(seq int64) ([]byte, error) {
					if err := call(ctx, s); err != nil {
						return nil, err
					}
					return []byte("x"), nil
				})
				if !errors.Is(err, outbox.ErrCallInsideTx) {
					t.Fatalf("EnqueueEvent whose builder calls %s: %v; want ErrCallInsideTx", name, err)
				}
				if seq, err := s.EnqueueEvent(ctx, "outer", outboxtest.LineOf("ok")); err != nil || seq != 1 {
					t.Fatalf("next enqueue: %d, %v; want seq 1", seq, err)
				}
			})
		}
	}
}

func TestReadTxReadsOneSnapshotAndNeverTakesTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("a")); err != nil {
		t.Fatal(err)
	}
	count := func(tx *sql.Tx) (n int) {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM events_outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Inside WriteTx's function the writer is held; ReadTx goes on beside it, and a commit made while
	// the snapshot is open is not seen by it.
	err := s.WriteTx(ctx, func(*sql.Tx) error {
		return s.ReadTx(ctx, func(tx *sql.Tx) error {
			if n := count(tx); n != 1 {
				t.Errorf("first read: %d rows; want 1", n)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.ReadTx(ctx, func(tx *sql.Tx) error {
		first := count(tx)
		done := make(chan error)
		go func() { _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("b")); done <- err }()
		if err := <-done; err != nil {
			return err
		}
		if n := count(tx); n != first {
			t.Errorf("the snapshot moved from %d rows to %d", first, n)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM events_outbox`); err == nil {
			t.Error("a write in ReadTx succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	errMine := errors.New("mine")
	if err := s.ReadTx(ctx, func(*sql.Tx) error { return errMine }); err != errMine {
		t.Errorf("fn's error came back as %v", err)
	}
	ro, err := outbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.ReadTx(ctx, func(tx *sql.Tx) error {
		if n := count(tx); n != 2 {
			t.Errorf("read-only store: %d rows; want 2", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestAPanicInReadTxIsTheCallersAndLeavesTheStoreUsable(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	func() {
		defer func() {
			if v := recover(); v != "mine" {
				t.Errorf("recovered %v", v)
			}
		}()
		s.ReadTx(context.Background(), func(*sql.Tx) error { panic("mine") })
	}()
	if err := s.ReadTx(context.Background(), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	if _, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("a")); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
}
