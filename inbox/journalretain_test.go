// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/journal"
)

// Retention itself, not a hand: a reader stopped behind a journal kept under a cap is told what the
// cap took from it, and a reader that keeps up keeps every segment it has not read.
func TestAReaderLeftBehindByTheJournalsCapIsToldWhatItLostAndOneThatKeepsUpLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "journal")
	j, err := journal.Open(dir, journal.WithSegmentSize(300), journal.WithMaxBytes(900))
	if err != nil {
		t.Fatal(err)
	}
	sj := &segJournal{t: t, dir: dir, j: j, seq: map[string]int64{}}
	t.Cleanup(func() { sj.j.Close() })
	behind, keeping := newConsumer(t), newConsumer(t)
	sj.add("a", 4, 2)
	for _, c := range []*consumer{behind, keeping} {
		if _, err := c.in.ApplyJournal(ctx, dir, record); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		sj.add("a", 4, 2)
		if _, err := keeping.in.ApplyJournal(ctx, dir, record); err != nil {
			t.Fatalf("the reader that keeps up: %v", err)
		}
	}
	if got := keeping.applied(); got["a"] != 44 {
		t.Fatalf("the reader that keeps up applied %v", got)
	}
	info, err := journal.Retained(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.First == 0 {
		t.Fatal("the cap deleted nothing: the test wants it to")
	}
	_, err = behind.in.ApplyJournal(ctx, dir, record)
	var gap *JournalGapError
	if !errors.Is(err, ErrRetentionGap) || !errors.As(err, &gap) {
		t.Fatalf("the reader left behind: %v, want a retention gap", err)
	}
	if gap.First != info.First || len(gap.RunsLost) != 1 || gap.RunsLost[0].RunID != "a" || gap.RunsLost[0].FirstSeq != 5 {
		t.Fatalf("the gap says %+v; the journal retains from %d", gap, info.First)
	}
	if got := behind.applied(); got["a"] != 4 {
		t.Fatalf("the reader left behind applied %v", got)
	}
}
