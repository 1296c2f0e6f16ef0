// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// rotateTwice renames path to .1 and .1 to .2 twice over, as logrotate does, with middle as the
// content of the journal written between the two rotations and last as the path's new file.
func rotateTwice(t *testing.T, path, middle, last string) {
	t.Helper()
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, middle)
	// The second rotation comes after the first's file was last written, as a writer's does.
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".1", path+".2"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, last)
}

// The consumer stopped inside journal.jsonl; while it was stopped the journal was rotated twice. The
// file between the two rotations (now journal.jsonl.1) holds b/1, b's only line: it is read after the
// file the position named and before the path's file, so nothing is lost and a is not quarantined.
// Older rotated files are not read again.
func TestAJournalRotatedTwiceWhileStoppedHasTheFileBetweenTheRotationsRead(t *testing.T) {
	for _, how := range []string{"apply", "release", "accept gap"} {
		t.Run(how, func(t *testing.T) {
			path := journalPath(t)
			// An older rotated file, last written long before: not read again.
			old := time.Now().Add(-time.Hour)
			writeFile(t, path+".3", jls(jl("z", 1)))
			if err := os.Chtimes(path+".3", old, old); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, jls(jl("q", 2), jl("a", 1)))
			c := newConsumer(t)
			c.applyFileQ(path)
			appendRaw(t, path, jl("a", 2))
			rotateTwice(t, path, jls(jl("b", 1), jl("a", 3)), jls(jl("c", 1), jl("a", 4)))
			if how != "apply" {
				c.lift(how, "q")
			}
			rep := c.applyFileQ(path)
			wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 1, "c": 1})
			if q := c.quarantine("a"); q != nil {
				t.Fatalf("a quarantined: %+v", q)
			}
			if how == "apply" && rep != (Report{Applied: 5}) {
				t.Fatalf("report %+v: an older file was read again", rep)
			}
			// Every rotated file is done with: deleting them changes nothing.
			for _, n := range []string{".1", ".2", ".3"} {
				os.Remove(path + n)
			}
			appendRaw(t, path, jl("c", 2))
			if rep := c.applyFileQ(path); rep != (Report{Applied: 1}) {
				t.Fatalf("after the rotated files were deleted: %+v", rep)
			}
		})
	}
}

// A running follower reads the journal while it is rotated twice (both rotations happen between two
// of its looks, here within one of its batches): the file between the two rotations is read after
// the one it holds open and before the path's new file, not skipped.
func TestAFollowerThatMissesARotationReadsTheFileBetweenTheRotations(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, jls(jl("a", 1), jl("a", 2)))
	var armed atomic.Bool
	armed.Store(true)
	hookErr := make(chan error, 1)
	c := newConsumer(t, WithBatchLines(1), WithPollInterval(10*time.Millisecond),
		WithBatchHook(func(string, Report) {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			hookErr <- func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("%v", r)
					}
				}()
				rotateTwice(t, path, jls(jl("b", 1), jl("a", 3)), jls(jl("a", 4), jl("c", 1)))
				return nil
			}()
		}))
	stop := c.follow(path, record)
	c.waitPosition("c", 1) // the last line
	if err := <-hookErr; err != nil {
		t.Fatal(err)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowFile: %v", err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 1, "c": 1})
	if q := c.quarantine("a"); q != nil {
		t.Fatalf("a quarantined: %+v", q)
	}
}

// The path is a symbolic link to the journal in another directory, where it is rotated twice while
// the consumer is stopped: the file between the rotations is looked for, and read, where the journal
// really is.
func TestAJournalBehindASymlinkRotatedTwiceHasTheFileBetweenTheRotationsRead(t *testing.T) {
	real := journalPath(t)
	link := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	writeFile(t, real, jls(jl("a", 1)))
	c := newConsumer(t)
	c.applyFile(link)
	appendRaw(t, real, jl("a", 2))
	rotateTwice(t, real, jls(jl("b", 1), jl("a", 3)), jls(jl("c", 1), jl("a", 4)))
	if rep := c.applyFile(link); rep != (Report{Applied: 5}) {
		t.Fatalf("report %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 1, "c": 1})
}

// copytruncate copies the journal to .1 and cuts it to nothing, as logrotate's copytruncate does,
// renaming .1 to .2 first.
func copyTruncate(t *testing.T, path string, at time.Time) {
	t.Helper()
	if _, err := os.Stat(path + ".1"); err == nil {
		if err := os.Rename(path+".1", path+".2"); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path+".1", string(b))
	if err := os.Chtimes(path+".1", at, at); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
}

// The journal is rotated twice by copytruncate while the consumer is stopped: the copy of what was
// written between the two (now journal.jsonl.1) is read after the copy that holds the position and
// before the journal itself.
func TestAJournalCopyTruncatedTwiceWhileStoppedHasTheCopyBetweenTheRotationsRead(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, jls(jl("a", 1)))
	c := newConsumer(t)
	c.applyFile(path)
	appendRaw(t, path, jl("a", 2))
	now := time.Now()
	copyTruncate(t, path, now)
	appendRaw(t, path, jls(jl("b", 1), jl("a", 3)))
	copyTruncate(t, path, now.Add(time.Second))
	appendRaw(t, path, jls(jl("c", 1), jl("a", 4)))
	rep := c.applyFile(path)
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 1, "c": 1})
	if rep != (Report{Applied: 5}) {
		t.Fatalf("report %+v", rep)
	}
}

// FileBehind counts the file between two rotations too: the source reads it before the path's.
func TestFileBehindCountsTheFileBetweenTwoRotations(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, jls(jl("a", 1)))
	c := newConsumer(t)
	c.applyFile(path)
	p := *c.position(path)
	appendRaw(t, path, jl("a", 2))
	middle, last := jls(jl("b", 1), jl("a", 3)), jls(jl("c", 1), jl("a", 4))
	rotateTwice(t, path, middle, last)
	n, found, err := FileBehind(path, p)
	if want := int64(len(jl("a", 2)) + len(middle) + len(last)); err != nil || !found || n != want {
		t.Fatalf("FileBehind: %d, %v, %v; want %d", n, found, err, want)
	}
	c.applyFile(path)
	p = *c.position(path)
	if n, found, err := FileBehind(path, p); err != nil || !found || n != 0 {
		t.Fatalf("FileBehind after reading: %d, %v, %v", n, found, err)
	}
}

// Another engine's journal beside this one, whose name only begins like it (journal.jsonl2), is not
// taken for a file rotated between two others, however recent.
func TestAFileThatOnlyBeginsLikeTheJournalsNameIsNotReadAsARotatedOne(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, jls(jl("a", 1)))
	c := newConsumer(t)
	c.applyFile(path)
	appendRaw(t, path, jl("a", 2))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path+"2", jls(jl("other", 1)))
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(path+"2", later, later); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, jls(jl("a", 3)))
	if rep := c.applyFile(path); rep != (Report{Applied: 2}) {
		t.Fatalf("report %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 3})
}
