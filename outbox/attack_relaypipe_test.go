// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// hookedSink is a sink over another one whose calls a test steers: before, if set, runs before each
// call with the call's number (from 1) and may fail it; after, if set, runs after a call that went
// through.
type hookedSink struct {
	sink   outbox.Sink
	mu     sync.Mutex
	calls  int
	before func(call int, ctx context.Context, lines []outbox.EventLine) error
	after  func(call int)
}

func (h *hookedSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	h.mu.Lock()
	h.calls++
	call := h.calls
	h.mu.Unlock()
	if h.before != nil {
		if err := h.before(call, ctx, lines); err != nil {
			return err
		}
	}
	if err := h.sink.Append(ctx, runID, lines); err != nil {
		return err
	}
	if h.after != nil {
		h.after(call)
	}
	return nil
}

// holdWriteLock takes the book's write lock from a connection of its own, so that the relay's next
// record waits for it (the store's busy timeout must outlast the hold); the returned function lets
// it go, once.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	tx, err := outboxtest.RawDBRW(t, path).Begin()
	if err == nil {
		_, err = tx.Exec(`UPDATE outbox_progress SET projected = projected WHERE 0`)
	}
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// lockAfterFirstAppend makes sink take the book's write lock once its first batch is in (see
// holdWriteLock), so that the relay's record of that batch waits; release lets the lock go, and does
// nothing before it was taken.
func lockAfterFirstAppend(t *testing.T, s *outbox.Store, sink *hookedSink) (release func()) {
	var mu sync.Mutex
	var held func()
	sink.after = func(call int) {
		if call == 1 {
			h := holdWriteLock(t, s.Path())
			mu.Lock()
			held = h
			mu.Unlock()
		}
	}
	return func() {
		mu.Lock()
		h := held
		mu.Unlock()
		if h != nil {
			h()
		}
	}
}

// A Flush whose context ends while the record of a batch the sink has waits for the write lock: the
// sink has that batch, so its record goes on to the end (bounded by the operation timeout, not by the
// caller's context), and the next Flush sends nothing twice.
func TestCancellingFlushWhileARecordIsInFlightStillRecordsTheBatchTheSinkHas(t *testing.T) {
	s := openStore(t, outbox.WithBusyTimeout(time.Minute))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &hookedSink{sink: openJournal(t, path)}
	sink.after = func(call int) {
		if call == 1 {
			release := holdWriteLock(t, s.Path())
			cancel() // batch 1's record is about to wait for the lock
			time.AfterFunc(20*time.Millisecond, release)
		}
	}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	if err := r.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush: %v, want context.Canceled", err)
	}
	if got, err := s.Projected(context.Background(), "run"); err != nil || got != 10 {
		t.Errorf("Projected after the cancelled Flush: %d, %v; want 10, the batch the sink has", got, err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep := verifyFile(t, path); rep.Lines != 30 || rep.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", rep.Lines, rep.Duplicates)
	}
}

// Close while a batch's record waits for the write lock: Close waits for the record, so the next
// process re-sends nothing; the relay is refused the batch after (ErrClosed).
func TestCloseWhileARecordIsInFlightWaitsForItAndRefusesTheNextAppend(t *testing.T) {
	opts := []outbox.Option{outbox.WithBusyTimeout(time.Minute), outbox.WithOpTimeout(time.Minute)}
	s := openStore(t, opts...)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	j := openJournal(t, path)
	sink := &hookedSink{sink: j}
	locked := make(chan struct{})
	release := lockAfterFirstAppend(t, s, sink)
	after := sink.after
	sink.after = func(call int) {
		after(call)
		if call == 1 {
			close(locked)
		}
	}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(context.Background()) }()
	<-locked
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close is meant to be waiting by now; if it is not, the test checks the same outcome.
	time.Sleep(50 * time.Millisecond)
	release()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-flushed; !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Flush across Close: %v, want ErrClosed", err)
	}
	if sink.calls != 1 {
		t.Errorf("the sink was called %d times, want 1: no append once Close has begun", sink.calls)
	}
	s2, err := outbox.Open(context.Background(), s.Path(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	if got, err := s2.Projected(context.Background(), "run"); err != nil || got != 10 {
		t.Errorf("Projected after Close: %d, %v; want 10, the batch the sink had", got, err)
	}
	if err := outboxtest.NewRelay(t, s2, j, "later").Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rep := verifyFile(t, path); rep.Lines != 30 || rep.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", rep.Lines, rep.Duplicates)
	}
}

// projectedReports collects WithOnProjected's calls and checks each as it comes: the batch it reports
// is recorded by then, and reports follow each other without a gap or an overlap.
type projectedReports struct {
	t     *testing.T
	s     *outbox.Store
	last  int64
	lines int
	calls []int // the lines of each report
}

func (p *projectedReports) report(runID string, lines int, last int64) {
	if got, err := p.s.Projected(context.Background(), runID); err != nil || got < last {
		p.t.Errorf("WithOnProjected reported up to %d while the store has recorded %d (%v)", last, got, err)
	}
	if lines < 1 || last != p.last+int64(lines) {
		p.t.Errorf("WithOnProjected reported %d lines up to %d after a report up to %d", lines, last, p.last)
	}
	p.last, p.lines = last, p.lines+lines
	p.calls = append(p.calls, lines)
}

// WithOnProjected hears of each batch once it is recorded, in order, and of every line once, whether
// the batch's record succeeded at once or failed and was made by the relay's next attempt.
func TestOnProjectedReportsOnlyRecordedBatchesInOrderAndEachLineOnce(t *testing.T) {
	for _, failRecord := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing record=%v", failRecord), func(t *testing.T) {
			s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			enqueueSpends(t, s, 30)
			sink := &hookedSink{sink: openJournal(t, path)}
			failed := 0
			if failRecord {
				sink.after = func(call int) {
					if call == 1 {
						release := holdWriteLock(t, s.Path())
						// Far past the busy timeout: batch 1's record fails, and again until the
						// lock goes.
						time.AfterFunc(200*time.Millisecond, release)
					}
				}
			}
			rep := &projectedReports{t: t, s: s}
			r := outboxtest.FastRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithOnProjected(rep.report))
			for {
				err := r.Flush(context.Background())
				if err == nil {
					break
				}
				if failed++; !failRecord || failed > 100 {
					t.Fatal(err)
				}
			}
			if rep.lines != 30 || rep.last != 30 {
				t.Errorf("WithOnProjected heard of %d lines up to %d, want 30 up to 30", rep.lines, rep.last)
			}
			t.Logf("reports: %v, %d failed Flushes", rep.calls, failed)
			if v := verifyFile(t, path); v.Lines != 30 || v.Duplicates != 0 {
				t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", v.Lines, v.Duplicates)
			}
		})
	}
}

// Batch 1's record fails (the write lock is held past the busy timeout) and the caller gives up:
// batch 1 is the sink's and not recorded, so RetireEvent refuses its lines (ErrProjected), and the
// next Flush records it first and sends batch 2 and on, nothing twice.
func TestABatchWhoseRecordFailedIsLeftToTheNextFlushNotToRetire(t *testing.T) {
	s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	sink := &hookedSink{sink: openJournal(t, path)}
	release := lockAfterFirstAppend(t, s, sink)
	r := outboxtest.FastRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithFlushAttempts(1))
	bg := context.Background()
	if err := r.Flush(bg); err == nil {
		t.Fatal("Flush with the write lock held past the busy timeout: nil error")
	}
	release()
	if got, err := s.Projected(bg, "run"); err != nil || got != 0 {
		t.Fatalf("Projected: %d, %v; want 0, batch 1's record having failed", got, err)
	}
	if err := s.RetireEvent(bg, "run", 5, "attack"); !errors.Is(err, outbox.ErrProjected) {
		t.Errorf("RetireEvent of a line the sink has, not recorded: %v, want ErrProjected", err)
	}
	if err := s.RetireEvent(bg, "run", 15, "attack"); err != nil {
		t.Errorf("RetireEvent of a line of the batch the sink never took: %v", err)
	}
	if err := r.Flush(bg); err != nil {
		t.Fatal(err)
	}
	if sink.calls != 3 {
		t.Errorf("the sink was called %d times, want 3: batch 1 recorded, not appended again", sink.calls)
	}
	if v := verifyFile(t, path); v.Lines != 30 || v.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", v.Lines, v.Duplicates)
	}
}
