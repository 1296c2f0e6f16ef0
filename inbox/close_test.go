// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestCloseDuringFollowFileEndsItWithErrClosed(t *testing.T) {
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
