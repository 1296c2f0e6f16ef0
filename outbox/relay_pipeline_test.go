// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// recordedFirst is a sink over a journal that, at each batch after the first, asks the store how far
// the run is recorded: every batch before it must be. After the first batch it takes the book's write
// lock from another connection for a moment, so that the record of that batch waits for it.
type recordedFirst struct {
	t     *testing.T
	s     *outbox.Store
	sink  outbox.Sink
	calls int
	early []string // batches that arrived before the one before them was recorded
}

func (l *recordedFirst) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	l.calls++
	if l.calls > 1 {
		if got, err := l.s.Projected(ctx, runID); err != nil || got != lines[0].Seq-1 {
			l.early = append(l.early, fmt.Sprintf("seq %d with the run recorded up to %d (%v)", lines[0].Seq, got, err))
		}
	}
	if err := l.sink.Append(ctx, runID, lines); err != nil {
		return err
	}
	if l.calls == 1 {
		tx, err := outboxtest.RawDBRW(l.t, l.s.Path()).Begin()
		if err == nil {
			_, err = tx.Exec(`UPDATE outbox_progress SET projected = projected WHERE 0`)
		}
		if err != nil {
			return err
		}
		time.AfterFunc(50*time.Millisecond, func() {
			if err := tx.Rollback(); err != nil {
				l.t.Error(err)
			}
		})
	}
	return nil
}

// The relay records each batch before it appends the next one, so that a crash leaves at most one
// batch in the sink that the store has not recorded: here the record of the first batch waits for a
// write lock another connection holds, and the second batch reaches the sink only once it is made.
func TestTheRelayRecordsEachBatchBeforeItAppendsTheNext(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, outbox.WithBusyTimeout(time.Minute))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	sink := &recordedFirst{t: t, s: s, sink: openJournal(t, path)}
	if err := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.early) > 0 {
		t.Errorf("batches appended before the batch before them was recorded: %v", sink.early)
	}
	if sink.calls != 3 {
		t.Errorf("the sink was called %d times, want 3", sink.calls)
	}
	if got, err := s.Projected(ctx, "run"); err != nil || got != 30 {
		t.Errorf("Projected after Flush: %d, %v; want 30", got, err)
	}
	if rep := verifyFile(t, path); rep.Lines != 30 || rep.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", rep.Lines, rep.Duplicates)
	}
}
