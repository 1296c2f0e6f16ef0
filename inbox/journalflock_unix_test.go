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
