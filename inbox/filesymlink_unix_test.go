// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The journal's path is a symbolic link to a journal in another directory, and the journal is
// rotated there (renamed to journal.jsonl.1 beside itself, a new journal.jsonl created) while the
// consumer is stopped: the rotated file is found where the file really is, read to its end, then the
// new journal.
func TestARotationWhereASymlinkedJournalReallyIsIsFound(t *testing.T) {
	for _, follow := range []bool{false, true} {
		dir, other := t.TempDir(), t.TempDir()
		path, real := filepath.Join(dir, "journal.jsonl"), filepath.Join(other, "journal.jsonl")
		writeFile(t, real, jls(jl("a", 1)))
		if err := os.Symlink(real, path); err != nil {
			t.Fatal(err)
		}
		c := newConsumer(t, WithPollInterval(10*time.Millisecond))
		c.applyFile(path)
		appendRaw(t, real, jls(jl("a", 2), jl("b", 1)))
		if err := os.Rename(real, real+".1"); err != nil {
			t.Fatal(err)
		}
		writeFile(t, real, jls(jl("a", 3), jl("c", 1)))
		if follow {
			stop := c.follow(path, record)
			c.waitPosition("c", 1)
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("FollowFile: %v", err)
			}
		} else if rep := c.applyFile(path); rep != (Report{Applied: 4}) {
			t.Fatalf("%+v", rep)
		}
		wantApplied(t, c.applied(), map[string]int64{"a": 3, "b": 1, "c": 1})
		behind, found, err := FileBehind(path, *c.position(path))
		if err != nil || !found || behind != 0 {
			t.Fatalf("FileBehind = %d, %v, %v", behind, found, err)
		}
	}
}

// FileBehind finds the rotated file of a symlinked journal where the file really is.
func TestFileBehindLooksWhereASymlinkedJournalReallyIs(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	path, real := filepath.Join(dir, "journal.jsonl"), filepath.Join(other, "journal.jsonl")
	writeFile(t, real, jls(jl("a", 1)))
	os.Symlink(real, path)
	c := newConsumer(t)
	c.applyFile(path)
	appendRaw(t, real, jl("a", 2))
	os.Rename(real, real+".1")
	writeFile(t, real, jl("a", 3))
	behind, found, err := FileBehind(path, *c.position(path))
	if err != nil || !found || behind != int64(2*len(jl("a", 2))) {
		t.Fatalf("FileBehind = %d, %v, %v; want %d, found", behind, found, err, 2*len(jl("a", 2)))
	}
}

// A follower of a symbolic link watches the directory where the journal really is: a line appended
// there wakes it, though its poll interval is longer than the test.
func TestAFollowerOfASymlinkedJournalIsWokenByWritesWhereTheFileReallyIs(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	path, real := filepath.Join(dir, "journal.jsonl"), filepath.Join(other, "journal.jsonl")
	writeFile(t, real, jl("a", 1))
	if err := os.Symlink(real, path); err != nil {
		t.Fatal(err)
	}
	if k := newWaker(path, time.Hour, slog.New(slog.DiscardHandler)); k.w == nil {
		k.close()
		t.Skip("no file notifications on this system")
	} else {
		k.close()
	}
	c := newConsumer(t, WithPollInterval(time.Hour))
	c.follow(path, record)
	c.waitPosition("a", 1)
	appendRaw(t, real, jl("a", 2))
	c.waitPosition("a", 2)
}
