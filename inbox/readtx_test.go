// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestReadTxRefusesAWrite(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	err := in.ReadTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO applied (run, seq, line) VALUES ('x', 1, 'x')`)
		return err
	})
	if err == nil {
		t.Error("a write inside ReadTx succeeded")
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows written through ReadTx", n)
	}
}

// A ReadTx function holds a connection of the read pool; a read of the inbox made inside it waited for
// another, forever once every connection was held so (a pool of one, or as many ReadTx at once as
// the pool has). It fails at once instead.
func TestAReadOfTheInboxFromInsideAReadTxFunctionFailsAtOnceInsteadOfWaitingForThePool(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithReadPoolSize(1))
	mustApply(t, in, lines("r", 1, 2))
	reads := map[string]func(ctx context.Context) error{
		"Position":    func(ctx context.Context) error { _, err := in.Position(ctx, "r"); return err },
		"Quarantined": func(ctx context.Context) error { _, err := in.Quarantined(ctx); return err },
		"ReadTx": func(ctx context.Context) error {
			return in.ReadTx(ctx, func(*sql.Tx) error { return nil })
		},
	}
	for name, read := range reads {
		var inner error
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- in.ReadTx(context.Background(), func(*sql.Tx) error { inner = read(ctx); return nil })
		}()
		select {
		case err := <-done:
			cancel()
			if err != nil {
				t.Errorf("%s: the outer ReadTx: %v", name, err)
			}
		case <-time.After(time.Minute): // a hang, not a measurement
			cancel()
			<-done
			t.Fatalf("%s inside ReadTx did not return", name)
		}
		if !errors.Is(inner, inbox.ErrCallInsideTx) {
			t.Errorf("%s inside ReadTx: %v, want ErrCallInsideTx", name, inner)
		}
	}
	// Outside, and inside a WriteTx function, the reads work as before.
	if p := position(t, in, "r"); p != 2 {
		t.Errorf("position %d, want 2", p)
	}
	err := in.WriteTx(context.Background(), func(*sql.Tx) error {
		_, err := in.Position(context.Background(), "r")
		return err
	})
	if err != nil {
		t.Errorf("a read inside WriteTx: %v", err)
	}
}
