// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// unrecordedUnits is how many once keys the engine below announces, in batches of 10.
const unrecordedUnits = 20

// unrecordedEngine announces unrecordedUnits once keys and projects them, and is killed once the
// journal has the first batch and before the relay records it.
func unrecordedEngine() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	dir := os.Getenv("DIR")
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	for i := range unrecordedUnits {
		key := fmt.Sprintf("unit-%d", i)
		if _, _, err := s.EnqueueOnce(ctx, "engine-1", key, journal.Builder("engine-1", "done", key)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	r, err := outbox.NewRelay(s, j, "engine-1", outbox.WithBatchSize(10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	err = r.Flush(ctx)
	fmt.Fprintf(os.Stderr, "the engine was not killed: Flush: %v\n", err)
	return 4
}

// An engine killed with a batch of once keys in the journal and not recorded: the next start's
// Recover re-sends that batch, byte for byte, and only that one, and moves every key into the ledger,
// so that none is announced again.
func TestAKillWithAnUnrecordedBatchOfOnceKeysAnnouncesNoKeyTwice(t *testing.T) {
	dir := t.TempDir()
	err := crashtest.Child(t, "unrecorded-engine",
		append(crashtest.KillAt(faultpoint.RelayAfterAppend, 1), "DIR="+dir)...).Run()
	if !crashtest.Killed(err) {
		t.Fatalf("the engine: %v, want killed", err)
	}
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p, err := s.Projected(ctx, "engine-1"); err != nil || p != 0 {
		t.Fatalf("the killed engine's run is recorded up to %d (%v), want 0: its batch unrecorded", p, err)
	}
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	r, err := outbox.NewRelay(s, j, "engine-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Lines != unrecordedUnits || rep.Duplicates != 10 {
		t.Errorf("the journal holds %d lines and %d duplicates, want %d and 10: the unrecorded batch re-sent once",
			rep.Lines, rep.Duplicates, unrecordedUnits)
	}
	for i := range unrecordedUnits {
		key := fmt.Sprintf("unit-%d", i)
		if ok, _, err := s.EnqueueOnce(ctx, "engine-2", key, journal.Builder("engine-2", "done", key)); err != nil || ok {
			t.Errorf("EnqueueOnce %s after the restart: announcing %v, %v; want false", key, ok, err)
		}
	}
}
