// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// lockAfterFirst is a sink over a journal that takes the book's write lock from another connection
// right after its first batch, so that the relay's record of that batch waits, and tells each later
// batch's arrival on next. onSecond, if set, decides the second batch's fate instead of the journal.
type lockAfterFirst struct {
	t        *testing.T
	s        *outbox.Store
	sink     outbox.Sink
	mu       sync.Mutex
	calls    int
	held     *sql.Tx
	next     chan int64 // the first seq of each batch after the first
	onSecond func([]outbox.EventLine) error
}

func (l *lockAfterFirst) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	l.mu.Lock()
	l.calls++
	call := l.calls
	l.mu.Unlock()
	if call == 2 && l.onSecond != nil {
		l.next <- lines[0].Seq
		return l.onSecond(lines)
	}
	if err := l.sink.Append(ctx, runID, lines); err != nil {
		return err
	}
	if call == 1 {
		tx, err := outboxtest.RawDBRW(l.t, l.s.Path()).Begin()
		if err == nil {
			_, err = tx.Exec(`UPDATE outbox_progress SET projected = projected WHERE 0`)
		}
		if err != nil {
			l.t.Error(err)
		}
		l.held = tx
		return nil
	}
	select {
	case l.next <- lines[0].Seq:
	default:
	}
	return nil
}

// The relay records a batch while it appends the next one, so a record's transaction (the book's
// write lock, SQLite's BEGIN and COMMIT) is off the path of the appends: here the second batch reaches
// the sink while the first batch's record waits for a write lock another connection holds. Once the
// lock goes, everything is recorded and nothing is sent twice.
func TestTheRelayAppendsTheNextBatchWhileTheLastOneIsBeingRecorded(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, outbox.WithBusyTimeout(time.Minute))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	sink := &lockAfterFirst{t: t, s: s, sink: openJournal(t, path), next: make(chan int64, 1)}
	done := make(chan error, 1)
	go func() { done <- outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10)).Flush(ctx) }()
	select {
	case seq := <-sink.next:
		if seq != 11 {
			t.Errorf("the batch appended beside the first one's record starts at %d, want 11", seq)
		}
	case err := <-done:
		t.Fatalf("Flush returned (%v) with the write lock held", err)
	case <-time.After(20 * time.Second): // a liveness bound, far above the milliseconds it takes
		sink.held.Rollback()
		<-done
		t.Fatal("the relay did not append the second batch while the first one's record waited for the write lock")
	}
	if got, err := s.Projected(ctx, "run"); err != nil || got != 0 {
		t.Errorf("Projected while the first record waits: %d, %v; want 0", got, err)
	}
	if err := sink.held.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := s.Projected(ctx, "run"); err != nil || got != 30 {
		t.Errorf("Projected after Flush: %d, %v; want 30", got, err)
	}
	if rep := verifyFile(t, path); rep.Lines != 30 || rep.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", rep.Lines, rep.Duplicates)
	}
}

// A sink that refuses the batch appended beside the record of the batch before it: the run is
// recorded up to that earlier batch and stopped at the refused one. The earlier record, which clears
// a run's stop, ends before the stop is written, whichever of the two would reach the write lock
// first.
func TestARefusalBesideTheRecordOfTheBatchBeforeItStopsTheRunAfterThatBatch(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, outbox.WithBusyTimeout(time.Minute))
	enqueueSpends(t, s, 30)
	errBad := fmt.Errorf("the second batch: %w", outbox.ErrSinkRefused)
	mem := &outboxtest.MemSink{}
	sink := &lockAfterFirst{t: t, s: s, sink: mem, next: make(chan int64, 1)}
	sink.onSecond = func([]outbox.EventLine) error {
		// The lock goes a moment after the refusal, while the first record still waits for it.
		time.AfterFunc(20*time.Millisecond, func() {
			if err := sink.held.Rollback(); err != nil {
				t.Error(err)
			}
		})
		return errBad
	}
	err := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithFlushAttempts(1)).Flush(ctx)
	if !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush: %v, want ErrSinkRefused", err)
	}
	st := runStats(t, s, "run")
	if st.Projected != 10 || st.StoppedSeq != 11 {
		t.Errorf("after the refusal: projected %d, stopped at %d; want 10 and 11", st.Projected, st.StoppedSeq)
	}
	if got := len(mem.All()); got != 10 {
		t.Errorf("the sink holds %d lines, want the first batch's 10", got)
	}
}
