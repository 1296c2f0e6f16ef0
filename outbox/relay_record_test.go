// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// cancelledAppendSink holds the first batch until the relay's context ends, then takes it into mem
// and succeeds: a sink whose write was under way when the engine's signal.NotifyContext fired.
type cancelledAppendSink struct {
	mem     *outboxtest.MemSink
	entered chan struct{}
	held    bool
}

func (c *cancelledAppendSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if !c.held {
		c.held = true
		close(c.entered)
		<-ctx.Done()
	}
	return c.mem.Append(context.WithoutCancel(ctx), runID, lines)
}

// Run's context cancelled while the sink appends a batch (SIGINT through signal.NotifyContext, before
// Close): the sink keeps the batch, so the relay records it all the same, and the next relay re-sends
// nothing. With the record on the caller's context, the record was dropped and the next relay sent the
// whole batch again.
func TestABatchInTheSinkIsRecordedWhenRunsContextEndsDuringItsAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "book.db")
	const backlog = 300
	s := openWithBacklog(t, path, backlog)
	sink := &cancelledAppendSink{mem: outboxtest.NewMemSink(), entered: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	relay := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(100))
	go func() { ran <- relay.Run(ctx) }()
	<-sink.entered
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sent := outboxtest.SeqsOf(sink.mem.All())
	if want := outboxtest.SeqRange(1, 100); !slices.Equal(sent, want) {
		t.Fatalf("the sink got %v before the signal, want %v", sent, want)
	}

	s2, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if p, err := s2.Projected(context.Background(), "run"); err != nil || p != 100 {
		t.Fatalf("Projected after the signal: %d, %v; want 100", p, err)
	}
	next := outboxtest.NewMemSink()
	if err := outboxtest.NewRelay(t, s2, next, "run").Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := outboxtest.SeqsOf(next.All()), outboxtest.SeqRange(101, backlog); !slices.Equal(got, want) {
		t.Fatalf("the next relay sent %v, want %d..%d and nothing again", got, 101, backlog)
	}
}

// The same through journal.File, the sink outbox relay uses: a Flush whose context ends once the
// journal holds its batch leaves a journal that the next relay completes without a duplicate.
func TestAJournalBatchIsRecordedWhenTheContextEndsAfterItsAppend(t *testing.T) {
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	const backlog = 300
	s := openWithBacklog(t, dbPath, backlog)
	j := openJournal(t, jPath)
	ctx, cancel := context.WithCancel(context.Background())
	sink := sinkFunc(func(actx context.Context, runID string, lines []outbox.EventLine) error {
		err := j.Append(actx, runID, lines)
		cancel() // the signal arrives as the batch becomes durable
		return err
	})
	if err := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(100)).Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush: %v, want context.Canceled", err)
	}
	if p, err := s.Projected(context.Background(), "run"); err != nil || p != 100 {
		t.Fatalf("Projected after the signal: %d, %v; want 100", p, err)
	}
	s = outboxtest.Reopen(t, s)
	if err := outboxtest.NewRelay(t, s, j, "run").Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep := verifyFile(t, jPath); rep.Lines != backlog || rep.Duplicates != 0 {
		t.Fatalf("the journal holds %d lines and %d duplicates, want %d and 0", rep.Lines, rep.Duplicates, backlog)
	}
}

// unrulySink keeps a copy of each batch, then does something to the slice it was given.
type unrulySink struct {
	mem  *outboxtest.MemSink
	harm func(lines []outbox.EventLine)
}

func (u *unrulySink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if err := u.mem.Append(ctx, runID, lines); err != nil {
		return err
	}
	u.harm(lines)
	return nil
}

// What the relay records comes from its own reading of the batch, taken before the sink is called: a
// sink that clears, reorders or renumbers the slice it was given neither makes the relay fail with a
// false ErrRowsMissing (after sending a batch twice) nor records a position the sink never reached.
func TestWhatTheRelayRecordsIsDecidedBeforeTheSinkHasTheBatch(t *testing.T) {
	harms := map[string]func([]outbox.EventLine){
		"clear":   func(l []outbox.EventLine) { clear(l) },
		"reverse": func(l []outbox.EventLine) { slices.Reverse(l) },
		"renumber": func(l []outbox.EventLine) {
			for i := range l {
				l[i].Seq += 1000
			}
		},
		"renumber down": func(l []outbox.EventLine) {
			for i := range l {
				l[i].Seq = 1
			}
		},
		"truncate lines": func(l []outbox.EventLine) {
			for i := range l {
				l[i].Line = l[i].Line[:0]
			}
		},
	}
	for name, harm := range harms {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const backlog = 1000
			s := openWithBacklog(t, filepath.Join(t.TempDir(), "book.db"), backlog)
			defer s.Close()
			onceKeys := []string{}
			for i := range 3 {
				key := "k" + string(rune('a'+i))
				if _, _, err := s.EnqueueOnce(ctx, "run", key, journal.Builder("run", "done", nil)); err != nil {
					t.Fatal(err)
				}
				onceKeys = append(onceKeys, key)
			}
			sink := &unrulySink{mem: outboxtest.NewMemSink(), harm: harm}
			// Small batches so that the reader ahead runs and its batches meet the sink too.
			if err := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(64)).Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			want := outboxtest.SeqRange(1, backlog+3)
			if got := outboxtest.SeqsOf(sink.mem.All()); !slices.Equal(got, want) {
				t.Fatalf("the sink got seqs %v, want 1..%d once each", got, backlog+3)
			}
			if p, err := s.Projected(ctx, "run"); err != nil || p != backlog+3 {
				t.Fatalf("Projected: %d, %v; want %d", p, err, backlog+3)
			}
			ledger, err := s.AnnouncedOnceKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range onceKeys {
				if !ledger[k] {
					t.Errorf("once key %q is not in the ledger", k)
				}
			}
		})
	}
}
