// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

const never = time.Hour // a poll interval no test waits for

func waitOnce(t *testing.T, k *waker, do func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- k.wait(context.Background()) }()
	do()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no wake-up in a minute") // a hang, not a timing assertion
	}
}

// The follower wakes on a write to its file, and on the creation or rename of a file in its
// directory (a rotation), without waiting for the poll.
func TestFollowerWakesOnNotificationsOfItsFileAndItsDirectory(t *testing.T) {
	path := journalPath(t)
	k := newWaker(path, never, slog.New(slog.DiscardHandler))
	defer k.close()
	if k.w == nil {
		t.Skip("no file notifications on this system")
	}
	waitOnce(t, k, func() { os.WriteFile(path, []byte("{}\n"), 0o644) })
	waitOnce(t, k, func() {
		f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString("{}\n")
		f.Close()
	})
	waitOnce(t, k, func() { os.Rename(path, path+".1") })
	waitOnce(t, k, func() { os.WriteFile(path, nil, 0o644) })
}

// A queue that overflowed (fsnotify.ErrEventOverflow: notifications were lost) wakes the follower
// at once, so that it looks at the file itself.
func TestAnOverflowOfNotificationsWakesTheFollower(t *testing.T) {
	path := journalPath(t)
	k := newWaker(path, never, slog.New(slog.DiscardHandler))
	defer k.close()
	if k.w == nil {
		t.Skip("no file notifications on this system")
	}
	waitOnce(t, k, func() { k.w.Errors <- fsnotify.ErrEventOverflow })
}

// Without notifications (none wanted, or none to be had) the poll wakes the follower; a directory
// that does not exist yet is watched once it does.
func TestFollowerPollsAsItsFloor(t *testing.T) {
	followNotify = false
	k := newWaker(journalPath(t), time.Millisecond, slog.New(slog.DiscardHandler))
	followNotify = true
	defer k.close()
	if k.w != nil {
		t.Fatal("a watcher without notifications")
	}
	waitOnce(t, k, func() {})

	dir := filepath.Join(t.TempDir(), "later")
	k2 := newWaker(filepath.Join(dir, "journal.jsonl"), time.Millisecond, slog.New(slog.DiscardHandler))
	defer k2.close()
	if k2.w == nil {
		t.Skip("no file notifications on this system")
	}
	if k2.watched[dir] {
		t.Fatal("watching a directory that does not exist")
	}
	os.Mkdir(dir, 0o755)
	waitOnce(t, k2, func() {})
	if !k2.watched[dir] {
		t.Fatal("the directory is not watched once it exists")
	}
}
