// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// A relay projects into a segmented journal as into a file: across rolls, and across a restart whose
// Recover goes on from what the sealed segments' indexes say.
func TestARelayProjectsIntoASegmentedJournalAcrossRollsAndARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	for life, run := range []string{"first", "second"} {
		s, err := outbox.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		j, err := journal.Open(dir, journal.WithSegmentSize(2000))
		if err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(s, j, run, outbox.WithBatchSize(7))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "spend", map[string]int{"i": i})); err != nil {
				t.Fatal(err)
			}
		}
		// The first life stops with its lines stored, the second's Recover projects them.
		if life == 1 {
			if err := relay.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
		s.Close()
	}
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, run := range []string{"first", "second"} {
		if last, err := j.LastSeq(run); err != nil || last != 101 {
			t.Errorf("LastSeq(%s) = %d, %v; want 101", run, last, err)
		}
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(names) < 5 {
		t.Fatalf("%d segments", len(names))
	}
	r, w, _ := os.Pipe()
	go func() {
		for _, name := range names {
			b, _ := os.ReadFile(name)
			w.Write(b)
		}
		w.Close()
	}()
	rep, err := journal.Verify(r)
	if err != nil || rep.Runs["first"].Last != 101 || rep.Runs["second"].Last != 101 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}
