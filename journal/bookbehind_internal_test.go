// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

func TestRecoverWithNothingPendingComparesTheBookWithoutReadingASealedSegmentsLines(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	for i := range runs {
		run := fmt.Sprintf("run-%03d", i)
		if _, err := s.EnqueueEvent(ctx, run, Handshake(run, nil)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.EnqueueOnce(ctx, run, run+"-order", Event("order_placed", i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// The next start projects them all, into many sealed segments.
	s, err = outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := Open(dir, WithSegmentSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(s, j, "second")
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j, err = Open(dir, WithSegmentSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(j.sealed) < 10 {
		t.Fatalf("%d sealed segments", len(j.sealed))
	}
	relay, err = outbox.NewRelay(s, j, "third")
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	listed, err := j.SinkRuns(ctx)
	if err != nil || len(listed) != runs || listed[0] != (outbox.SinkRun{RunID: "run-000", LastSeq: 2}) {
		t.Fatalf("SinkRuns: %d runs, first %+v, %v", len(listed), listed[0], err)
	}
	if j.read > j.size {
		t.Fatalf("the start read %d bytes of lines; the last segment holds %d", j.read, j.size)
	}
}
