// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// followUntil starts FollowFile on path and waits until run r is at seq want.
func followUntil(t *testing.T, in *inbox.Inbox, path, run string, want int64) (context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(ctx, path, insertNothing) }()
	deadline := time.Now().Add(4 * time.Second)
	for position(t, in, run) != want {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("FollowFile did not reach %s %d", run, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cancel, done
}

func endsWithin(t *testing.T, cancel context.CancelFunc, done chan error, what string) error {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(3 * time.Second):
		t.Fatalf("FollowFile did not return after its context ended (%s)", what)
		return nil
	}
}

func TestAFIFOPutInPlaceOfAFollowedJournalDoesNotHoldFollowFilePastItsContext(t *testing.T) {
	in, _ := setup(t, inbox.WithPollInterval(10*time.Millisecond))
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.jsonl")
	if err := os.WriteFile(path, append(line("r", 1), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	cancel, done := followUntil(t, in, path, "r", 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // a few polls meet the FIFO
	err := endsWithin(t, cancel, done, "a FIFO at the path")
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("FollowFile: %v", err)
	}
}

func TestTheFollowedJournalsDirectoryRemovedCostsNoHang(t *testing.T) {
	in, _ := setup(t, inbox.WithPollInterval(10*time.Millisecond))
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "journal.jsonl")
	if err := os.WriteFile(path, append(line("r", 1), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	cancel, done := followUntil(t, in, path, "r", 1)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Logf("FollowFile ended by itself: %v", err)
		return
	default:
	}
	// the directory and the journal come back: the follower goes on
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(append(line("r", 1), '\n'), append(line("r", 2), '\n')...), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for position(t, in, "r") != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := position(t, in, "r"); p != 2 {
		t.Errorf("after the directory came back: position %d", p)
	}
	if err := endsWithin(t, cancel, done, "directory removed"); !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowFile: %v", err)
	}
}
