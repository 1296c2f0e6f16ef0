// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestAttackABatchHookThatClosesTheInboxEndsTheSourceWithErrClosed(t *testing.T) {
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

func TestAttackABatchHookThatCallsGoexitLeavesTheInboxUsable(t *testing.T) {
	in, _ := setup(t, inbox.WithBatchLines(2), inbox.WithBatchHook(func(string, inbox.Report) { runtime.Goexit() }))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	var b []byte
	for _, l := range lines("r", 1, 5) {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.ApplyFile(context.Background(), path, insertNothing)
	}()
	<-done
	if p := position(t, in, "r"); p != 2 {
		t.Fatalf("position %d, want the first batch", p)
	}
	// Bounds for a hang, not measures: a loaded machine may take seconds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := in.Apply(ctx, lines("r", 3, 3), insertNothing); err != nil {
		t.Fatalf("after the hook's Goexit: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- in.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close hung after the hook's Goexit")
	}
}
