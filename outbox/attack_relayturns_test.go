// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// slowRecords makes every commit of the store wait a moment before it commits, so that a relay's
// record takes long enough for the other relays, the retirer and the producers to meet it.
func slowRecords(t *testing.T) {
	faultpoint.Set(func(p string) {
		if p == faultpoint.BeforeCommit {
			time.Sleep(time.Millisecond)
		}
	})
	t.Cleanup(func() { faultpoint.Set(nil) })
}

// Two relays of one run, each forgetting what it projects, take turns while their records are slowed
// down; producers enqueue and a caller retires lines meanwhile. Each line reaches the sink
// once, as a tombstone exactly when RetireEvent said it retired it, and the book keeps none of them.
func TestRelaysTakingTurnsWithRecordsInFlightRacingRetireEventSendEachLineOnce(t *testing.T) {
	const producers, perProducer = 2, 300
	slowRecords(t)
	ctx := context.Background()
	s := openStore(t)
	mem := outboxtest.NewMemSink()
	// A slow sink keeps the relays behind the producers, so that the retirer finds pending lines.
	// A sink that fails every third batch makes the relays give their turn up with lines pending,
	// which the retirer then finds.
	sink := &hookedSink{sink: mem, before: func(call int, _ context.Context, _ []outbox.EventLine) error {
		if call%3 == 0 {
			return outboxtest.ErrSinkDown
		}
		return nil
	}}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 2 {
		r := outboxtest.FastRelay(t, s, sink, "run", outbox.WithBatchSize(4+i*3), outbox.WithForgetProjected(true),
			outbox.WithPollInterval(time.Millisecond))
		wg.Go(func() {
			if i == 0 {
				if err := r.Run(runCtx); !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("Run: %w", err)
				}
				return
			}
			for runCtx.Err() == nil {
				if err := r.Flush(runCtx); err != nil && runCtx.Err() == nil && !errors.Is(err, outboxtest.ErrSinkDown) {
					errs <- fmt.Errorf("Flush: %w", err)
					return
				}
			}
		})
	}
	var retiredMu sync.Mutex
	retired := map[int64]bool{}
	var newest atomic.Int64 // the last seq a producer was given
	wg.Go(func() {
		for done := int64(0); runCtx.Err() == nil && done < producers*perProducer; {
			seq := newest.Load()
			if seq == done {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			done = seq
			err := s.RetireEvent(runCtx, "run", seq, "attack")
			switch {
			case err == nil:
				retiredMu.Lock()
				retired[seq] = true
				retiredMu.Unlock()
			case errors.Is(err, outbox.ErrProjected), runCtx.Err() != nil:
			default:
				errs <- fmt.Errorf("RetireEvent %d: %w", seq, err)
				return
			}
		}
	})
	var pw sync.WaitGroup
	for p := range producers {
		pw.Go(func() {
			for i := 0; i < perProducer; i += 5 {
				builds := make([]outbox.EventBuilder, 5)
				for k := range builds {
					builds[k] = journal.Builder("run", "spend", map[string]int{"producer": p, "i": i + k})
				}
				seqs, err := s.EnqueueEvents(ctx, "run", builds)
				if err != nil {
					errs <- err
					return
				}
				for last := seqs[len(seqs)-1]; ; {
					if old := newest.Load(); old >= last || newest.CompareAndSwap(old, last) {
						break
					}
				}
			}
		})
	}
	pw.Wait()
	if err := outboxtest.FastRelay(t, s, sink, "run", outbox.WithForgetProjected(true), outbox.WithFlushAttempts(10)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[int64]int{}
	for _, l := range mem.All() {
		seen[l.Seq]++
		if tomb := bytes.Contains(l.Line, []byte(`"type":"retired"`)); tomb != retired[l.Seq] {
			t.Errorf("seq %d reached the sink as a tombstone: %v; RetireEvent retired it: %v", l.Seq, tomb, retired[l.Seq])
		}
	}
	for seq := int64(1); seq <= producers*perProducer; seq++ {
		if seen[seq] != 1 {
			t.Errorf("seq %d reached the sink %d times, want once", seq, seen[seq])
		}
	}
	projected, err := s.Projected(ctx, "run")
	if kept := outboxtest.CountRows(t, s.Path(), "engine_run_id = 'run'"); err != nil || kept != 0 || projected != producers*perProducer {
		t.Errorf("after the relays: %d rows kept, projected %d (%v); want 0 and %d", kept, projected, err, producers*perProducer)
	}
	t.Logf("%d lines retired", len(retired))
}

// A batch of once keys reached the sink and its record failed. The relay's next attempt records it,
// its once keys included, before it appends anything; a process that stops instead leaves it to the
// next start, whose Recover re-sends it, byte for byte, and moves its keys into the ledger, beside the
// runs of other earlier processes. Either way no key is announced again.
func TestAnUnrecordedBatchOfOnceKeysIsLedgeredByTheNextAttemptOrTheNextStart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			for i := range 20 {
				key := fmt.Sprintf("unit-%d", i)
				if ok, _, err := s.EnqueueOnce(ctx, "run", key, journal.Builder("run", "done", key)); err != nil || !ok {
					t.Fatalf("EnqueueOnce %s: %v, %v", key, ok, err)
				}
			}
			for _, other := range []string{"other-a", "other-b"} {
				for range 7 {
					if _, err := s.EnqueueEvent(ctx, other, journal.Builder(other, "spend", 1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			j := openJournal(t, path)
			var release func()
			sink := &hookedSink{sink: j, after: func(call int) {
				if call == 1 {
					release = holdWriteLock(t, s.Path())
				}
			}}
			r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithFlushAttempts(1))
			if err := r.Flush(ctx); err == nil {
				t.Fatal("Flush with the write lock held: nil error")
			}
			if got := sink.calls; got != 1 {
				t.Fatalf("the sink was called %d times, want 1: nothing after the batch whose record failed", got)
			}
			release()
			wantDup := 0
			if restart {
				s = outboxtest.Reopen(t, s, outbox.WithBusyTimeout(time.Minute))
				if err := outboxtest.NewRelay(t, s, j, "next", outbox.WithBatchSize(4)).Recover(ctx); err != nil {
					t.Fatal(err)
				}
				wantDup = 10
			} else {
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if st := runStats(t, s, "run"); st.Projected != 20 || st.LedgerLines != 20 {
					t.Errorf("after the next attempt: projected %d, %d keys in the ledger; want 20 and 20", st.Projected, st.LedgerLines)
				}
				if err := outboxtest.NewRelay(t, s, j, "other-a").Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if err := outboxtest.NewRelay(t, s, j, "other-b").Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			v := verifyFile(t, path)
			if v.Lines != 34 || v.Runs["run"].Duplicates != wantDup {
				t.Errorf("the journal holds %d lines, run's with %d duplicates; want 34 and %d", v.Lines, v.Runs["run"].Duplicates, wantDup)
			}
			for i := range 20 {
				key := fmt.Sprintf("unit-%d", i)
				if ok, _, err := s.EnqueueOnce(ctx, "next", key, journal.Builder("next", "done", key)); err != nil || ok {
					t.Errorf("EnqueueOnce %s afterwards: announcing %v, %v; want false: it is in the journal", key, ok, err)
				}
			}
		})
	}
}

// Close gives a blocked append its wait (the operation timeout) and no more; the append that returns
// after the store closed is left unrecorded, the record before it kept, and the relay is told
// ErrClosed, not left hanging or touching a closed book. The next start re-sends that batch only.
func TestCloseGivesUpOnAnAppendBlockedPastItsWaitAndTheNextStartResendsOnlyThatBatch(t *testing.T) {
	// The operation timeout is Close's wait for the append, and also the bound of the first batch's
	// record: short, it would let a loaded machine overrun that record and fail the run before Close. Any wait proves the point, since the append stays blocked until
	// Close has returned. Every other call has a deadline of its own (Patient), which the operation
	// timeout does not shorten.
	ctx := outboxtest.Patient(t)
	s := openStore(t, outbox.WithOpTimeout(2*time.Second))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	j := openJournal(t, path)
	inSecond, unblock := make(chan struct{}), make(chan struct{})
	sink := &hookedSink{sink: j, before: func(call int, _ context.Context, _ []outbox.EventLine) error {
		if call == 2 {
			close(inSecond)
			<-unblock
		}
		return nil
	}}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(ctx) }()
	<-inSecond
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(unblock)
	select {
	case err := <-flushed:
		if !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("Flush across Close: %v, want ErrClosed", err)
		}
	case <-time.After(liveness):
		t.Fatal("Flush did not return after Close")
	}
	// The next start has the default wait: its Recover records the batch it re-sends.
	s2, err := outbox.Open(ctx, s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	if got, err := s2.Projected(ctx, "run"); err != nil || got != 10 {
		t.Errorf("Projected after Close: %d, %v; want 10", got, err)
	}
	if err := outboxtest.NewRelay(t, s2, j, "later").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if v := verifyFile(t, path); v.Lines != 30 || v.Duplicates != 10 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 10 (the batch Close gave up on)", v.Lines, v.Duplicates)
	}
}

// Run's context cancelled at any moment (before a batch, during an append, while a record is in
// flight) costs nothing twice: each Run returns context.Canceled, and what the sink took is recorded
// or re-sent by no one.
func TestRunCancelledAtAnyMomentSendsNothingTwice(t *testing.T) {
	slowRecords(t)
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j := openJournal(t, path)
	sink := &hookedSink{sink: j, before: func(call int, _ context.Context, _ []outbox.EventLine) error {
		time.Sleep(time.Duration(call%3) * time.Millisecond)
		return nil
	}}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(3))
	for i := range 40 {
		enqueueSpends(t, s, 10)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i%8)*time.Millisecond, cancel)
		if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run %d: %v, want context.Canceled", i, err)
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := verifyFile(t, path); v.Lines != 400 || v.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 400 and 0", v.Lines, v.Duplicates)
	}
}

// A sink that panics in Append, or calls runtime.Goexit (t.FailNow in a test's sink), and a
// WithOnProjected callback that panics: the caller's goroutine recovers or ends, and the relay lets go
// of the batch in flight as it unwinds, so that Close does not wait out its whole wait for a batch
// that will never be recorded; the batch the sink took before is recorded, and the next Flush sends
// nothing twice.
func TestACallerPanicOrGoexitInsideTheRelayLeavesNoBatchInFlightForCloseToWaitFor(t *testing.T) {
	// projected is where the run is recorded once the goroutine has unwound: up to the batch before
	// the sink's failing call, or the batch the callback hears of, which is recorded before it is told.
	cases := map[string]struct {
		sink      func(call int)
		callback  func(calls int)
		projected int64
	}{
		"sink panics":           {sink: func(call int) { panic("the caller's bug") }, projected: 10},
		"sink calls Goexit":     {sink: func(call int) { runtime.Goexit() }, projected: 10},
		"callback panics":       {callback: func(int) { panic("the caller's bug") }, projected: 10},
		"callback calls Goexit": {callback: func(int) { runtime.Goexit() }, projected: 10},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, outbox.WithOpTimeout(time.Minute))
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			enqueueSpends(t, s, 30)
			armed := true
			sink := &hookedSink{sink: openJournal(t, path), before: func(call int, _ context.Context, _ []outbox.EventLine) error {
				if call == 2 && armed && c.sink != nil {
					c.sink(call)
				}
				return nil
			}}
			calls := 0
			r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithOnProjected(func(string, int, int64) {
				calls++
				if calls == 1 && armed && c.callback != nil {
					c.callback(calls)
				}
			}))
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				r.Flush(context.Background())
			}()
			select {
			case <-done:
			case <-time.After(liveness):
				t.Fatal("Flush did not end")
			}
			armed = false
			if got, err := s.Projected(context.Background(), "run"); err != nil || got != c.projected {
				t.Errorf("Projected after the relay's goroutine unwound: %d, %v; want %d", got, err, c.projected)
			}
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if v := verifyFile(t, path); v.Lines != 30 || v.Duplicates != 0 {
				t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", v.Lines, v.Duplicates)
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(liveness):
				t.Fatal("Close waited for a batch the relay let go of")
			}
		})
	}
}

// Recover over many earlier runs, its context cancelled again and again at any moment: each attempt goes on where the last one stopped, and once one finishes the
// journal holds every line once and the book none of the earlier runs' rows.
func TestRecoverCancelledAtAnyMomentOverManyRunsSendsNothingTwice(t *testing.T) {
	const runs, perRun = 12, 9
	slowRecords(t)
	ctx := context.Background()
	s := openStore(t)
	for i := range runs {
		run := fmt.Sprintf("earlier-%02d", i)
		builds := make([]outbox.EventBuilder, perRun)
		for k := range builds {
			builds[k] = journal.Builder(run, "spend", k)
		}
		if _, err := s.EnqueueEvents(ctx, run, builds); err != nil {
			t.Fatal(err)
		}
	}
	s = outboxtest.Reopen(t, s)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	r := outboxtest.NewRelay(t, s, openJournal(t, path), "next", outbox.WithBatchSize(4))
	progressed := 0
	for i := 0; ; i++ {
		cctx, cancel := context.WithCancel(ctx)
		if i < 100 { // then one to the end
			time.AfterFunc(time.Duration(i%12)*time.Millisecond, cancel)
		}
		if v := verifyFile(t, path); v.Lines > 0 && v.Lines < runs*perRun {
			progressed++
		}
		err := r.Recover(cctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Recover %d: %v, want context.Canceled or nil", i, err)
		}
	}
	if v := verifyFile(t, path); v.Lines != runs*perRun || v.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want %d and 0", v.Lines, v.Duplicates, runs*perRun)
	}
	t.Logf("%d attempts began part of the way through", progressed)
	if kept := outboxtest.CountRows(t, s.Path(), "1"); kept != 0 {
		t.Errorf("the book keeps %d rows of the earlier runs, want 0", kept)
	}
}
