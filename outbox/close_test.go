// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestClose gathers what Close promises: it returns while calls, builders, groups and relays are
// anywhere in their work, bounded by the operation timeout; it waits for the record of a batch the
// sink has and lets no append start; and it leaves only what was acknowledged, nothing to send twice.
func TestClose(t *testing.T) {
	t.Run("CloseRacingAGoexitGroupReturns", testCloseRacingAGoexitGroupReturns)
	t.Run("CloseWhileARecordIsInFlightWaitsForItAndRefusesTheNextAppend", testCloseWhileARecordIsInFlightWaitsForItAndRefusesTheNextAppend)
	t.Run("CloseGivesUpOnAnAppendBlockedPastItsWaitAndTheNextStartResendsOnlyThatBatch", testCloseGivesUpOnAnAppendBlockedPastItsWaitAndTheNextStartResendsOnlyThatBatch)
	t.Run("ACallerPanicOrGoexitInsideTheRelayLeavesNoBatchInFlightForCloseToWaitFor", testACallerPanicOrGoexitInsideTheRelayLeavesNoBatchInFlightForCloseToWaitFor)
	t.Run("CloseDuringADrainWithTinyBatchesLeavesTheStoreConsistent", testCloseDuringADrainWithTinyBatchesLeavesTheStoreConsistent)
	t.Run("CloseDuringConcurrentCallsLeavesOnlyWhatWasAcknowledged", testCloseDuringConcurrentCallsLeavesOnlyWhatWasAcknowledged)
	t.Run("CloseWithAStuckBuilderReturnsWithinTheOpTimeoutNamingIt", testCloseWithAStuckBuilderReturnsWithinTheOpTimeoutNamingIt)
	t.Run("CloseDuringADrainWaitsForTheBatchInFlightAndNothingIsSentAgain", testCloseDuringADrainWaitsForTheBatchInFlightAndNothingIsSentAgain)
	t.Run("CloseWaitsForAStuckSinkOnlyUpToTheOpTimeout", testCloseWaitsForAStuckSinkOnlyUpToTheOpTimeout)
	t.Run("CloseAtAnyMomentOfADrainLeavesNothingToSendAgain", testCloseAtAnyMomentOfADrainLeavesNothingToSendAgain)
}

// testCloseRacingAGoexitGroupReturns: Close called while the committer's goroutine is being ended by
// a builder's runtime.Goexit and replaced must return, and the calls must all have returned.
func testCloseRacingAGoexitGroupReturns(t *testing.T) {
	for round := 0; round < 10; round++ {
		s, _ := outboxtest.Setup(t)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.EnqueueEvent(context.Background(), "r", func(seq int64) ([]byte, error) {
					if i%2 == 0 {
						runtime.Goexit()
					}
					return []byte(`{"x":1}`), nil
				})
			}()
		}
		within(t, "Close racing a Goexit group", func() { s.Close() })
		within(t, "the enqueues after Close", wg.Wait)
	}
}

// Close while a batch's record waits for the write lock: Close waits for the record, so the next
// process re-sends nothing; the relay is refused the batch after (ErrClosed).
func testCloseWhileARecordIsInFlightWaitsForItAndRefusesTheNextAppend(t *testing.T) {
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

// Close gives a blocked append its wait (the operation timeout) and no more; the append that returns
// after the store closed is left unrecorded, the record before it kept, and the relay is told
// ErrClosed, not left hanging or touching a closed book. The next start re-sends that batch only.
func testCloseGivesUpOnAnAppendBlockedPastItsWaitAndTheNextStartResendsOnlyThatBatch(t *testing.T) {
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

// A sink that panics in Append, or calls runtime.Goexit (t.FailNow in a test's sink), and a
// WithOnProjected callback that panics: the caller's goroutine recovers or ends, and the relay lets go
// of the batch in flight as it unwinds, so that Close does not wait out its whole wait for a batch
// that will never be recorded; the batch the sink took before is recorded, and the next Flush sends
// nothing twice.
func testACallerPanicOrGoexitInsideTheRelayLeavesNoBatchInFlightForCloseToWaitFor(t *testing.T) {
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

// testCloseDuringADrainWithTinyBatchesLeavesTheStoreConsistent: a store closed while a relay drains a
// backlog one line at a time with its reader ahead running: Flush returns (ErrClosed or done), the
// sink holds a prefix of the lines, once each, and a reopened store's relay sends exactly the rest.
func testCloseDuringADrainWithTinyBatchesLeavesTheStoreConsistent(t *testing.T) {
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	for range 200 {
		outboxtest.MustEnqueue(t, s, "r")
	}
	sink := outboxtest.NewMemSink()
	r := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchBytes(1))
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(ctx) }()
	for range 5 {
		<-sink.Got()
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-flushed; err != nil && !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Flush during Close: %v", err)
	}
	first := outboxtest.SeqsOf(sink.All())
	t.Logf("the sink held %d of 200 lines at Close", len(first))
	if fmt.Sprint(first) != fmt.Sprint(outboxtest.SeqRange(1, int64(len(first)))) {
		t.Fatalf("sink holds %v, not a prefix", first)
	}
	s2, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.Projected(ctx, "r"); got != int64(len(first)) || err != nil {
		t.Fatalf("Projected after reopen = %d, %v; the sink holds %d", got, err, len(first))
	}
	if err := outboxtest.NewRelay(t, s2, sink, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := outboxtest.SeqsOf(sink.All()); fmt.Sprint(got) != fmt.Sprint(outboxtest.SeqRange(1, 200)) {
		t.Fatalf("sink holds %v after the reopened relay, want 1..200 once each", got)
	}
}

// testCloseDuringConcurrentCallsLeavesOnlyWhatWasAcknowledged closes a store while goroutines enqueue:
// every call either returns a seq (and that line is stored) or fails, with ErrClosed once the store is
// closed; nothing panics, and the database reopens with exactly the acknowledged lines, dense.
func testCloseDuringConcurrentCallsLeavesOnlyWhatWasAcknowledged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]bool{}
	start := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 200; i++ {
				seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("x"))
				if err != nil {
					if !errors.Is(err, outbox.ErrClosed) {
						t.Errorf("enqueue during Close: %v", err)
					}
					return
				}
				mu.Lock()
				acked[seq] = true
				mu.Unlock()
			}
		}()
	}
	close(start)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 50 {
			break
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s2, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("reopen after Close: %v (the lock was not released?)", err)
	}
	defer s2.Close()
	stored := outboxtest.SeqsOf(outboxtest.AllLines(t, s2, "r"))
	if diff := cmp.Diff(outboxtest.SeqRange(1, int64(len(acked))), stored); diff != "" {
		t.Errorf("stored lines are not exactly the %d acknowledged, dense (-want +got):\n%s", len(acked), diff)
	}
}

// Close while a builder never returns and every caller waits for an hour: Close gives up on the
// builder once it has waited the operation timeout, fails its call (ErrBuilderStuck), commits the
// call before it, fails the calls still queued (ErrClosed), and returns an error naming the stuck
// call. What each caller was told matches the book as the next Open finds it.
func testCloseWithAStuckBuilderReturnsWithinTheOpTimeoutNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "book.db")
	s := openShortOps(t, path, 200*time.Millisecond)
	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	stuck, stuckReturned, entered := blockedBuilder(t)
	got := newOutcomes()
	returned := lineUpInOneGroup(t, s, got,
		groupCall{"before", long, named("before")},
		groupCall{"stuck", long, stuck},
		groupCall{"after", long, named("after")})
	<-entered
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("queued-%d", i)
			seq, err := s.EnqueueEvent(long, "r", named(id))
			got.record(id, seq, err)
		}()
	}
	err := s.Close()
	if !errors.Is(err, outbox.ErrBuilderStuck) || !strings.Contains(err.Error(), `line 3 of run "r"`) ||
		!strings.Contains(err.Error(), "Close") {
		t.Fatalf("Close: %v, want ErrBuilderStuck naming line 3 of run r and Close's wait", err)
	}
	if stuckReturned.Load() {
		t.Fatal("Close returned only once the builder had")
	}
	for range 4 {
		<-returned
	}
	wg.Wait()
	if err := got.got["stuck"].err; !errors.Is(err, outbox.ErrBuilderStuck) {
		t.Fatalf("the stuck call: %v, want ErrBuilderStuck", err)
	}
	s2, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	t.Logf("%d of %d calls stored", got.check(t, storedByID(t, s2)), got.len())
}

// Close, called while the sink appends a batch, waits until the batch is recorded; the relay then
// appends nothing more, and the next process re-sends nothing. Without the wait, the batch landed
// after Close had returned, its record failed on the closed store, and the next start sent it again.
func testCloseDuringADrainWaitsForTheBatchInFlightAndNothingIsSentAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, path := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	const backlog = 2000
	s := openWithBacklog(t, dbPath, backlog)
	j := openJournal(t, path)
	sink := newGatedSink(j, 3)
	flushed := make(chan error, 1)
	relay := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(100))
	go func() { flushed <- relay.Flush(ctx) }()
	<-sink.held
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Let Close begin before the batch is let through; a Close that has not begun yet by then
	// finds the batch recorded, which must hold too.
	time.Sleep(50 * time.Millisecond)
	close(sink.release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	sink.closed.Store(true)
	if n := sink.active.Load(); n != 0 {
		t.Fatalf("%d appends still running after Close returned", n)
	}
	if err := <-flushed; !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Flush across Close: %v, want ErrClosed", err)
	}
	if n := sink.late.Load(); n != 0 {
		t.Fatalf("%d appends began after Close returned", n)
	}
	sent := sink.lines.Load()

	s2, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	after := newGatedSink(j, 0)
	if err := outboxtest.NewRelay(t, s2, after, "run").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := sent+after.lines.Load(), int64(backlog); got != want {
		t.Errorf("the sink got %d lines before Close and %d after reopening: %d in all, want %d", sent, after.lines.Load(), got, want)
	}
	if rep := verifyFile(t, path); rep.Lines != backlog || rep.Duplicates != 0 {
		t.Fatalf("the journal holds %d lines and %d duplicates, want %d and 0", rep.Lines, rep.Duplicates, backlog)
	}
}

// Close waits for a batch in flight only up to the operation timeout: a sink that never answers
// cannot hang it.
func testCloseWaitsForAStuckSinkOnlyUpToTheOpTimeout(t *testing.T) {
	s, sink, flushed := stuckRelay(t)
	defer close(sink.free)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	sink.free <- struct{}{}
	if err := <-flushed; !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Flush: %v, want ErrClosed from the record on the closed store", err)
	}
}

// Close at a random moment of a drain, by Run or by Flush, with or without another relay of the run:
// after Close returns nothing more reaches the sink, and the next process's Flush completes the
// journal with no line sent twice.
func testCloseAtAnyMomentOfADrainLeavesNothingToSendAgain(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range closeRounds(t) {
		dir := t.TempDir()
		dbPath, path := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
		const backlog = 300
		s := openWithBacklog(t, dbPath, backlog)
		j, err := journal.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sink := newGatedSink(j, 0)
		var wg sync.WaitGroup
		for k := range 1 + round%2 {
			r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(5+rng.IntN(20)))
			wg.Go(func() {
				var err error
				if (round+k)%3 == 0 {
					err = r.Run(ctx)
				} else {
					err = r.Flush(ctx)
				}
				if err != nil && !errors.Is(err, outbox.ErrClosed) {
					t.Errorf("round %d: relay: %v", round, err)
				}
			})
		}
		time.Sleep(time.Duration(rng.IntN(30_000)) * time.Microsecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		sink.closed.Store(true)
		if n := sink.active.Load(); n != 0 {
			t.Fatalf("round %d: %d appends running after Close returned", round, n)
		}
		wg.Wait()
		if n := sink.late.Load(); n != 0 {
			t.Fatalf("round %d: %d appends began after Close returned", round, n)
		}

		s2, err := outbox.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := outboxtest.NewRelay(t, s2, j, "run").Flush(ctx); err != nil {
			t.Fatal(err)
		}
		s2.Close()
		j.Close()
		if rep := verifyFile(t, path); rep.Lines != backlog || rep.Duplicates != 0 {
			t.Fatalf("round %d: the journal holds %d lines and %d duplicates, want %d and 0",
				round, rep.Lines, rep.Duplicates, backlog)
		}
	}
}
