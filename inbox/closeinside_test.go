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

// Close waits for the calls in progress, so a Close made from inside one waited for itself: it
// fails at once instead, and the inbox goes on and closes once the call has returned.
func TestCloseFromInsideAFunctionOrAHandlerOfTheInboxFailsAtOnceInsteadOfWaitingForItself(t *testing.T) {
	t.Parallel()
	calls := map[string]func(in *inbox.Inbox, closeIt func() error) error{
		"WriteTx": func(in *inbox.Inbox, closeIt func() error) error {
			return in.WriteTx(context.Background(), func(*sql.Tx) error { return closeIt() })
		},
		"ReadTx": func(in *inbox.Inbox, closeIt func() error) error {
			return in.ReadTx(context.Background(), func(*sql.Tx) error { return closeIt() })
		},
		"a handler": func(in *inbox.Inbox, closeIt func() error) error {
			_, err := in.Apply(context.Background(), [][]byte{line("r", 1)}, func(context.Context, *sql.Tx, inbox.Event) error {
				return closeIt()
			})
			return err
		},
		"ReadTx inside WriteTx": func(in *inbox.Inbox, closeIt func() error) error {
			return in.WriteTx(context.Background(), func(*sql.Tx) error {
				return in.ReadTx(context.Background(), func(*sql.Tx) error { return closeIt() })
			})
		},
	}
	for name, call := range calls {
		in, _ := setup(t)
		var inner error
		done := make(chan error, 1)
		go func() {
			done <- call(in, func() error { inner = in.Close(); return inner })
		}()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hang, not a measurement
			t.Fatalf("%s: Close from inside did not return", name)
		}
		if !errors.Is(inner, inbox.ErrCallInsideTx) {
			t.Errorf("%s: Close from inside: %v, want ErrCallInsideTx", name, inner)
		}
		if _, err := in.Position(context.Background(), "r"); err != nil {
			t.Errorf("%s: the inbox after the refused Close: %v", name, err)
		}
		if err := in.Close(); err != nil {
			t.Errorf("%s: Close afterwards: %v", name, err)
		}
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
