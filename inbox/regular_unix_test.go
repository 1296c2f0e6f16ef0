// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// TestOpenRefusesWhatIsNotARegularFileAtOnce: a directory or a named pipe in the database's place is
// refused before SQLite opens it (it would block reading a pipe), and nothing is created beside it.
func TestOpenRefusesWhatIsNotARegularFileAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for kind, path := range map[string]string{"a named pipe": pipe, "a directory": sub} {
		done := make(chan error, 1)
		go func() {
			in, err := inbox.Open(context.Background(), path)
			if err == nil {
				in.Close()
			}
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("Open of %s has not returned: it blocks on it", kind)
		}
		if err == nil || !strings.Contains(err.Error(), "is "+kind+", not a regular file") {
			t.Errorf("Open of %s: %v, want it refused as not a regular file", kind, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("the directory holds %d entries after the refused opens, want the 2 made", len(entries))
	}
}

// TestAnInboxConnectionToAFileReplacedSinceOpenIsRefused: every connection an inbox opens after Open
// is on the file Open locked, not on another put in its place, which it would read (and could write)
// while the lock guards a file no longer named.
func TestAnInboxConnectionToAFileReplacedSinceOpenIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	mustApply(t, in, lines("a", 1, 3))
	other, otherPath := setup(t)
	mustApply(t, other, lines("b", 1, 5))
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(otherPath, path); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Position(ctx, "b"); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("a read after the database was replaced: %v, want it refused", err)
	}
}
