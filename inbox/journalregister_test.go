// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
)

// Not parallel: it sets the package's registration hook and interval.
func TestAJournalReaderRegistersWhenACallEndsOrItGoesIdleNotAfterEveryBatchAndNeverAheadOfItsDatabase(t *testing.T) {
	ctx := context.Background()
	sj := newSegJournal(t, 1<<20)
	sj.add("a", 200, 200)
	c := newConsumer(t, WithBatchLines(1))
	name := journalSourcePrefix + sj.dir

	registerEvery = time.Hour
	var writes []int64
	afterJournalRegister = func(dir string, pos int64) {
		stored, err := c.in.SourcePosition(ctx, name)
		if err != nil {
			t.Error(err)
			return
		}
		at := int64(0)
		if stored != nil {
			jp, err := ParseJournalPosition(stored)
			if err != nil {
				t.Error(err)
				return
			}
			at = jp.Position
		}
		if pos > at {
			t.Errorf("registered byte %d while the database holds byte %d", pos, at)
		}
		writes = append(writes, pos)
	}
	defer func() { afterJournalRegister, registerEvery = nil, 250*time.Millisecond }()

	registeredAt := func() int64 {
		t.Helper()
		rs, err := journal.Readers(sj.dir)
		if err != nil || len(rs) != 1 {
			t.Fatalf("readers %v: %v", rs, err)
		}
		return rs[0].Position
	}
	stored := func() int64 {
		t.Helper()
		b, err := c.in.SourcePosition(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		jp, err := ParseJournalPosition(b)
		if err != nil {
			t.Fatal(err)
		}
		return jp.Position
	}

	rep, err := c.in.ApplyJournal(ctx, sj.dir, record)
	if err != nil || rep.Applied != 200 {
		t.Fatalf("ApplyJournal: %+v, %v", rep, err)
	}
	// 200 batches, and the file written at the start and when the call ended.
	if len(writes) != 2 || writes[0] != 0 {
		t.Fatalf("ApplyJournal of 200 batches wrote the reader file at %v, want at its start and its end", writes)
	}
	registeredEnd := stored()
	if registeredAt() != registeredEnd || writes[1] != registeredEnd {
		t.Fatalf("after ApplyJournal the reader file says byte %d, the database %d", registeredAt(), registeredEnd)
	}

	// A follower writes it when it returns...
	writes = nil
	follow := func(ctx context.Context, h Handler) chan error {
		done := make(chan error, 1)
		go func() { done <- c.in.FollowJournal(ctx, sj.dir, h) }()
		return done
	}
	seen := make(chan int64, 1000)
	fctx, cancel := context.WithCancel(ctx)
	done := follow(fctx, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		seen <- ev.Seq
		return record(ctx, tx, ev)
	})
	sj.add("a", 50, 50)
	for seq := range seen {
		if seq == 250 {
			break
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if len(writes) != 2 || writes[0] != registeredEnd {
		t.Fatalf("a follower applying 50 batches wrote the reader file at %v, want at its start (byte %d) and its end", writes, registeredEnd)
	}
	if end := stored(); registeredAt() != end || writes[1] != end {
		t.Fatalf("after FollowJournal returned the reader file says byte %d, the database %d", registeredAt(), end)
	}

	// ...and once it has had nothing to read for the rest of the interval.
	registerEvery = time.Millisecond
	sj.add("a", 10, 10)
	idle := make(chan int64, 100)
	hook := afterJournalRegister
	afterJournalRegister = func(dir string, pos int64) {
		hook(dir, pos)
		idle <- pos
	}
	fctx, cancel = context.WithCancel(ctx)
	defer cancel()
	done = follow(fctx, record)
	for pos := range idle {
		if c.applied()["a"] == 260 && pos == stored() {
			break
		}
	}
	if end := stored(); registeredAt() != end {
		t.Fatalf("an idle follower's reader file says byte %d, the database %d", registeredAt(), end)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// The reader file's last write, when a call ends, is what lets retention remove what the call
// applied: one that fails is reported, by ApplyJournal when the call itself succeeded, and by
// FollowJournal when its context ended it (its clean end), not dropped behind the context's error.
// The reader file is replaced by a directory while the last line is applied, after the call's first
// write of it, so that only the write when the call ends fails. Not parallel: it sets the interval.
func TestAJournalCallWhoseFinalReaderRegistrationFailsReportsItsError(t *testing.T) {
	registerEvery = time.Hour
	defer func() { registerEvery = 250 * time.Millisecond }()
	ctx := context.Background()
	// inTheWayAt returns a handler that replaces the reader file of c with a directory when it applies
	// line last of run "a", and a channel closed once it has.
	inTheWayAt := func(c *consumer, dir string, last int64) (Handler, <-chan struct{}) {
		done := make(chan struct{})
		var once sync.Once
		return func(ctx context.Context, tx *sql.Tx, ev Event) (err error) {
			if ev.Seq == last {
				once.Do(func() {
					if err = inTheWay(c, dir); err == nil {
						close(done)
					}
				})
				if err != nil {
					return err
				}
			}
			return record(ctx, tx, ev)
		}, done
	}
	failedToRegister := func(t *testing.T, call string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "register reader") {
			t.Fatalf("%s whose final registration failed: %v, want the registration's error", call, err)
		}
		if errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v wraps context.Canceled: a caller would take it for its own shutdown", call, err)
		}
	}

	t.Run("ApplyJournal", func(t *testing.T) {
		sj := newSegJournal(t, 1<<20)
		sj.add("a", 20, 20)
		c := newConsumer(t, WithBatchLines(5))
		h, replaced := inTheWayAt(c, sj.dir, 20)
		rep, err := c.in.ApplyJournal(ctx, sj.dir, h)
		<-replaced
		failedToRegister(t, "ApplyJournal", err)
		if rep.Applied != 20 || c.applied()["a"] != 20 {
			t.Fatalf("ApplyJournal: %+v, %v applied; want all 20 lines committed", rep, c.applied())
		}
	})

	t.Run("FollowJournal", func(t *testing.T) {
		sj := newSegJournal(t, 1<<20)
		sj.add("a", 20, 20)
		c := newConsumer(t, WithBatchLines(5))
		h, replaced := inTheWayAt(c, sj.dir, 20)
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.in.FollowJournal(fctx, sj.dir, h) }()
		<-replaced
		// The batch holding line 20 commits after its handler returns: wait for it before the end.
		for c.applied()["a"] != 20 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		failedToRegister(t, "FollowJournal", <-done)
	})
}

// inTheWay replaces the reader file of c in the journal dir with a directory that is not empty, which
// no rename replaces. A registration written beside the reading may put the file back between the
// removal and the directory's creation: it tries again until the directory stands.
func inTheWay(c *consumer, dir string) error {
	file := filepath.Join(dir, c.in.readerName()+".reader")
	for deadline := time.Now().Add(time.Minute); ; {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		err := os.MkdirAll(filepath.Join(file, "in-the-way"), 0o755)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
