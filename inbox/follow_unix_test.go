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
// hangBound is how long these tests wait for the follower before calling it hung: a bound for a hang
// on a machine loaded many times over, not an expectation of speed.
const hangBound = time.Minute

func followUntil(t *testing.T, in *inbox.Inbox, path, run string, want int64) (context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(ctx, path, insertNothing) }()
	deadline := time.Now().Add(hangBound)
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
	case <-time.After(hangBound):
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
	// A look while the directory is gone ends FollowFile by itself; a follower that does not look
	// until the directory is back goes on. Which of the two happens is up to the scheduler (a loaded
	// machine can keep the follower from looking for long), so either is taken whenever it comes.
	time.Sleep(50 * time.Millisecond) // a few polls may meet the missing directory
	// the directory and the journal come back: the follower goes on, unless it has already ended
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(append(line("r", 1), '\n'), append(line("r", 2), '\n')...), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hangBound)
	for position(t, in, "r") != 2 {
		select {
		case err := <-done:
			t.Logf("FollowFile ended by itself: %v", err)
			cancel()
			return
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("after the directory came back: FollowFile neither ended nor read on, position %d", position(t, in, "r"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := endsWithin(t, cancel, done, "directory removed"); !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowFile: %v", err)
	}
}
