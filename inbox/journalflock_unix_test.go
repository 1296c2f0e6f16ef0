// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func TestASegmentHeldOpenByAReaderIsLockedSharedAndReadToItsEndWhenRemoved(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 500)
	sj.add("a", 14, 2)
	c := newConsumer(t, WithBatchLines(1))
	entered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.Seq == 2 {
			once.Do(func() { close(entered); <-resume })
		}
		return record(ctx, tx, ev)
	}
	c.followJournal(sj.dir, h)
	<-entered
	seg0 := filepath.Join(sj.dir, segmentFileName(0))
	f, err := os.Open(seg0)
	if err != nil {
		t.Fatal(err)
	}
	// What retention does before it removes a segment: refused while the reader holds it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("an exclusive lock on the segment being read: %v, want EWOULDBLOCK", err)
	}
	f.Close()
	if err := os.Remove(seg0); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(sj.dir, "00000000000000000000.idx"))
	close(resume)
	c.waitPosition("a", 14)
	if got := c.applied(); got["a"] != 14 {
		t.Fatalf("applied %v", got)
	}
}

func TestAReaderWhoseSegmentRetentionIsRemovingGoesOnOnceItIsGone(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 300)
	sj.add("a", 8, 2)
	segs := sj.segments()
	if len(segs) < 2 {
		t.Fatal("the test wants two segments")
	}
	c := newConsumer(t, WithBatchLines(1))
	ctx := context.Background()
	// Read segment 0 to its end, and stop at the first line of the next.
	next := errors.New("stop at the next segment")
	h := func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if jp := c.journalPositionOrZero(sj.dir); jp.Position == segs[1] {
			return next
		}
		return record(ctx, tx, ev)
	}
	if _, err := c.in.ApplyJournal(ctx, sj.dir, h); !errors.Is(err, next) {
		t.Fatalf("%v", err)
	}
	if jp := c.journalPosition(sj.dir); jp.Position != segs[1] || jp.Segment != 0 {
		t.Fatalf("position %v, want the end of segment 0", jp)
	}
	// What retention does: lock the segment, then unlink it and its index.
	seg0 := filepath.Join(sj.dir, segmentFileName(0))
	f, err := os.Open(seg0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.in.ApplyJournal(ctx, sj.dir, record)
		done <- err
	}()
	os.Remove(seg0)
	os.Remove(filepath.Join(sj.dir, "00000000000000000000.idx"))
	f.Close()
	if err := <-done; err != nil {
		t.Fatalf("ApplyJournal while segment 0 was removed: %v", err)
	}
	if got := c.applied(); got["a"] != 8 {
		t.Fatalf("applied %v", got)
	}
}

func (c *consumer) journalPositionOrZero(dir string) JournalPosition {
	abs, _ := filepath.Abs(dir)
	pos, err := c.in.SourcePosition(context.Background(), journalSourcePrefix+abs)
	if err != nil || pos == nil {
		return JournalPosition{}
	}
	jp, _ := ParseJournalPosition(pos)
	return jp
}
