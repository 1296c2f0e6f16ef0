// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
)

func TestApplyFileAndFollowFileRefuseASegmentOfAJournalDirectoryInsteadOfStoppingAtItsSeal(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 3*segLineSize)
	sj.add("a", 2, 1)
	c := newConsumer(t)
	seg := filepath.Join(sj.dir, segmentFileName(0))
	rep, err := c.in.ApplyFile(context.Background(), seg, record)
	if !errors.Is(err, journal.ErrNotJournal) || rep.Applied != 0 {
		t.Errorf("ApplyFile of a segment = %+v, %v; want journal.ErrNotJournal and nothing applied", rep, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.in.FollowFile(ctx, seg, record) }()
	// The journal rolls past the segment: read as a file, it would never grow again.
	sj.add("a", 5, 1)
	if len(sj.segments()) < 2 {
		t.Fatal("the journal did not roll: the test wants it to")
	}
	var ferr error
	select {
	case ferr = <-done:
	case <-time.After(time.Minute):
		// Still following a file that no longer grows: what it applied is checked below.
		cancel()
		ferr = <-done
	}
	if !errors.Is(ferr, journal.ErrNotJournal) {
		t.Errorf("FollowFile of a segment = %v, want journal.ErrNotJournal", ferr)
	}
	if got := c.applied(); len(got) != 0 {
		t.Errorf("applied %v from a segment read as a file", got)
	}
	if _, err := c.in.ApplyJournal(context.Background(), sj.dir, record); err != nil {
		t.Fatal(err)
	}
	if got := c.applied(); got["a"] != 7 {
		t.Errorf("ApplyJournal of the directory applied %v, want run a's 7 lines", got)
	}
}
