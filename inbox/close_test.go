// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// TestClose gathers what Close promises: it waits for the call in progress, fails at once when
// made from inside a call of the inbox, leaves every later call ErrClosed, and ends a source it
// meets, whether following a file or inside its batch hook, with ErrClosed.
func TestClose(t *testing.T) {
	t.Run("CloseWaitsForTheCallInProgress", closeWaitsForTheCallInProgress)
	t.Run("CloseFromInsideAFunctionOrAHandlerOfTheInboxFailsAtOnceInsteadOfWaitingForItself", closeFromInsideAFunctionOrAHandlerOfTheInboxFailsAtOnceInsteadOfWaitingForItself)
	t.Run("CallsAfterCloseAreErrClosed", callsAfterCloseAreErrClosed)
	t.Run("CloseDuringFollowFileEndsItWithErrClosed", closeDuringFollowFileEndsItWithErrClosed)
	t.Run("ABatchHookThatClosesTheInboxEndsTheSourceWithErrClosed", aBatchHookThatClosesTheInboxEndsTheSourceWithErrClosed)
}

func closeWaitsForTheCallInProgress(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	inside, release := make(chan struct{}), make(chan struct{})
	applied := make(chan error)
	go func() {
		_, err := in.Apply(context.Background(), lines("r", 1, 1), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			close(inside)
			<-release
			return insertHandler(ctx, tx, ev)
		})
		applied <- err
	}()
	<-inside
	closed := make(chan error)
	go func() { closed <- in.Close() }()
	close(release)
	if err := <-applied; err != nil {
		t.Fatalf("the call in progress: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 1 {
		t.Errorf("%d rows", n)
	}
}

// Close waits for the calls in progress, so a Close made from inside one waited for itself: it
// fails at once instead, and the inbox goes on and closes once the call has returned.
func closeFromInsideAFunctionOrAHandlerOfTheInboxFailsAtOnceInsteadOfWaitingForItself(t *testing.T) {
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

func callsAfterCloseAreErrClosed(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := in.Apply(ctx, lines("r", 1, 1), insertHandler); !errors.Is(err, inbox.ErrClosed) {
		t.Errorf("Apply: %v", err)
	}
	if _, err := in.Position(ctx, "r"); !errors.Is(err, inbox.ErrClosed) {
		t.Errorf("Position: %v", err)
	}
	if err := in.Release(ctx, "r"); !errors.Is(err, inbox.ErrClosed) {
		t.Errorf("Release: %v", err)
	}
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func closeDuringFollowFileEndsItWithErrClosed(t *testing.T) {
	in, _ := setup(t, inbox.WithPollInterval(10*time.Millisecond))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(path, append(line("r", 1), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(ctx, path, insertNothing) }()
	for position(t, in, "r") != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, inbox.ErrClosed) {
			t.Fatalf("FollowFile after Close: %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		cancel()
		<-done
		t.Fatal("FollowFile went on after Close")
	}
}

func aBatchHookThatClosesTheInboxEndsTheSourceWithErrClosed(t *testing.T) {
	var in *inbox.Inbox
	in, _ = setup(t, inbox.WithBatchLines(2), inbox.WithBatchHook(func(string, inbox.Report) {
		if err := in.Close(); err != nil {
			t.Error(err)
		}
	}))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	var b []byte
	for _, l := range lines("r", 1, 5) {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := in.ApplyFile(context.Background(), path, insertNothing)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, inbox.ErrClosed) {
			t.Fatalf("ApplyFile: %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close inside the batch hook hung")
	}
}
