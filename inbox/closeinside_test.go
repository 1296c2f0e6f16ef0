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
