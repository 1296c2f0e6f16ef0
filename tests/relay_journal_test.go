// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestABuilderThatWritesTheWrongSeqStopsTheRelay: a builder that always writes "seq":1 once made two
// of three events vanish as duplicates. The journal refuses the second line, the relay stops with the
// refusal, and the rows stay to be projected once the builder is fixed.
func TestABuilderThatWritesTheWrongSeqStopsTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for range 3 {
		if _, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { return []byte(`{"engine_run_id":"r","seq":1}`), nil }); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.OpenFile(filepath.Join(t.TempDir(), "j.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	err = outboxtest.FastRelay(t, s, j, "r", outbox.WithBatchSize(1)).Flush(ctx)
	if !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush = %v, want ErrSinkRefused", err)
	}
	if last, _ := j.LastSeq("r"); last != 1 {
		t.Errorf("the journal holds the run up to %d, want 1", last)
	}
	// The line the journal took is forgotten as projected; the two it refused stay.
	if pending := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); len(pending) != 2 || pending[0] != 2 {
		t.Errorf("rows kept: %v, want 2 and 3", pending)
	}
}

// TestARelayPointedAtAnotherJournalDoesNotStartARunMidway: a relay whose run is projected up to seq 2
// in one journal, pointed at a new one, would start the run at seq 3 there. The new journal refuses,
// and stays empty.
func TestARelayPointedAtAnotherJournalDoesNotStartARunMidway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	dir := t.TempDir()
	first, err := journal.OpenFile(filepath.Join(dir, "first.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for range 2 {
		s.EnqueueEvent(ctx, "r", journal.Builder("r", "x", nil))
	}
	if err := outboxtest.FastRelay(t, s, first, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.EnqueueEvent(ctx, "r", journal.Builder("r", "x", nil))
	other := filepath.Join(dir, "other.jsonl")
	j, err := journal.OpenFile(other)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	err = outboxtest.FastRelay(t, s, j, "r").Flush(ctx)
	if !errors.Is(err, journal.ErrStreamGap) || !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush into another journal = %v, want ErrStreamGap and ErrSinkRefused", err)
	}
	if b, _ := os.ReadFile(other); len(b) != 0 {
		t.Errorf("the other journal holds %q", b)
	}
	if err := outboxtest.FastRelay(t, s, first, "r").Flush(ctx); err != nil {
		t.Errorf("Flush into the first journal: %v", err)
	}
}

// TestAJournalPathAtADatabaseLeavesTheDatabaseAlone: `outbox relay --journal other.db` once cut the
// "torn tail" of a second book and appended to it.
func TestAJournalPathAtADatabaseLeavesTheDatabaseAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	for _, p := range []string{path, path + "-wal"} {
		before, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if j, err := journal.OpenFile(p); !errors.Is(err, journal.ErrNotJournal) {
			if err == nil {
				j.Close()
			}
			t.Errorf("OpenFile(%s) = %v, want ErrNotJournal", p, err)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
			t.Errorf("%s changed", p)
		}
	}
	if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x")); err != nil || seq != 2 {
		t.Errorf("the book after: (%d, %v)", seq, err)
	}
}
