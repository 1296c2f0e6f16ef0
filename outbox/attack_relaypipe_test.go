package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// liveness bounds a wait for something that takes milliseconds; far above it, so that only a hang
// (a call waiting for itself until the operation timeout) reaches it.
const liveness = 20 * time.Second

// relayCalls are a relay's calls, each made as a nested caller would.
var relayCalls = map[string]func(ctx context.Context, r *outbox.Relay) error{
	"Flush":   func(ctx context.Context, r *outbox.Relay) error { return r.Flush(ctx) },
	"Recover": func(ctx context.Context, r *outbox.Relay) error { return r.Recover(ctx) },
	"Run":     func(ctx context.Context, r *outbox.Relay) error { return r.Run(ctx) },
}

// A relay called from inside a transaction of its store (a WriteTx function, a builder) would record
// its batches with the writer that transaction holds. It fails at once with ErrCallInsideTx, before
// it appends anything: a batch appended then could not be recorded, and the relay's record, made on a
// goroutine of its own beside the next append, would wait for the writer until the operation timeout
// instead of being caught.
func TestARelayCalledFromInsideATransactionFailsAtOnceAndAppendsNothing(t *testing.T) {
	inside := map[string]func(s *outbox.Store, call func() error) error{
		"WriteTx": func(s *outbox.Store, call func() error) error {
			return s.WriteTx(context.Background(), func(*sql.Tx) error { return call() })
		},
		"builder": func(s *outbox.Store, call func() error) error {
			_, err := s.EnqueueEvent(context.Background(), "outer", func(int64) ([]byte, error) {
				return []byte("x"), call()
			})
			return err
		},
	}
	for where, in := range inside {
		for _, group := range []bool{true, false} {
			for name, call := range relayCalls {
				t.Run(fmt.Sprintf("%s/%s/group=%v", where, name, group), func(t *testing.T) {
					opts := []outbox.Option{outbox.WithGroupCommit(group), outbox.WithOpTimeout(time.Minute)}
					s := openStore(t, opts...)
					ctx := context.Background()
					enqueueSpends(t, s, 30)
					// Reopened, the run is an earlier process's, which Recover projects too.
					s = outboxtest.Reopen(t, s, opts...)
					run := "run"
					if name == "Recover" {
						run = "later"
					}
					sink := outboxtest.NewMemSink()
					r := outboxtest.NewRelay(t, s, sink, run, outbox.WithBatchSize(10))
					var inner error
					done := make(chan error, 1)
					go func() {
						done <- in(s, func() error {
							inner = call(ctx, r)
							return inner
						})
					}()
					select {
					case <-done:
					case <-time.After(liveness):
						t.Fatalf("%s from inside a transaction did not return", name)
					}
					if !errors.Is(inner, outbox.ErrCallInsideTx) {
						t.Errorf("%s from inside a transaction: %v, want ErrCallInsideTx", name, inner)
					}
					if got := len(sink.All()); got != 0 {
						t.Errorf("the sink got %d lines from a relay that could not record them", got)
					}
					// Outside the transaction the same relay projects everything.
					after := r.Flush
					if name == "Recover" {
						after = r.Recover
					}
					if err := after(ctx); err != nil {
						t.Fatal(err)
					}
					if got := len(sink.All()); got != 30 {
						t.Errorf("the sink holds %d lines after the relay ran outside, want 30", got)
					}
				})
			}
		}
	}
}

// nestedEnqueue is a builder that calls the store, as a careless one would, and says what it was told.
func nestedEnqueue(s *outbox.Store, told chan<- error) outbox.EventBuilder {
	return func(int64) ([]byte, error) {
		_, err := s.EnqueueEvent(context.Background(), "inner", outboxtest.LineOf("x"))
		told <- err
		return []byte("x"), err
	}
}

// enqueueWithin makes an EnqueueEvent with build and fails the test when it has not returned within
// the liveness bound: a nested call that is not caught waits for itself until the operation timeout.
func enqueueWithin(t *testing.T, s *outbox.Store, ctx context.Context, build outbox.EventBuilder) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.EnqueueEvent(ctx, "outer", build)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(liveness):
		t.Fatal("EnqueueEvent did not return")
		return nil
	}
}

// The committer marks its goroutine as the writer's only while a builder or the line check runs, and
// reads that goroutine once per loop. A line check that calls the store is caught as a builder is,
// with group commit on and off; and after the committer's goroutine was replaced (a builder called
// runtime.Goexit, or overran its deadline and its group was taken over), a builder that calls the
// store on the new goroutine is still caught at once.
func TestTheCommittersNestedCallCheckHoldsForLineChecksAndAfterItsGoroutineIsReplaced(t *testing.T) {
	ctx := context.Background()
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("line check/group=%v", group), func(t *testing.T) {
			var s *outbox.Store
			told := make(chan error, 1)
			s = openStore(t, outbox.WithGroupCommit(group), outbox.WithOpTimeout(time.Minute),
				outbox.WithLineCheck(func(runID string, _ int64, _ []byte) error {
					if runID != "outer" {
						return nil
					}
					_, err := s.EnqueueEvent(context.Background(), "inner", outboxtest.LineOf("x"))
					told <- err
					return err
				}))
			if err := enqueueWithin(t, s, ctx, outboxtest.LineOf("y")); !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Errorf("EnqueueEvent whose line check calls the store: %v, want ErrCallInsideTx", err)
			}
			if err := <-told; !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Errorf("the line check's call: %v, want ErrCallInsideTx", err)
			}
		})
	}
	t.Run("after Goexit", func(t *testing.T) {
		s := openStore(t, outbox.WithOpTimeout(time.Minute))
		for round := range 3 {
			err := enqueueWithin(t, s, ctx, func(int64) ([]byte, error) { runtime.Goexit(); return nil, nil })
			if err == nil {
				t.Fatalf("round %d: a builder that called runtime.Goexit: nil error", round)
			}
			told := make(chan error, 1)
			if err := enqueueWithin(t, s, ctx, nestedEnqueue(s, told)); !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Fatalf("round %d: a nested call on the new committer: %v, want ErrCallInsideTx", round, err)
			}
			if err := <-told; !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Fatalf("round %d: the builder was told %v, want ErrCallInsideTx", round, err)
			}
		}
	})
	t.Run("after a panic", func(t *testing.T) {
		s := openStore(t, outbox.WithOpTimeout(time.Minute))
		func() {
			defer func() {
				if v := recover(); v != "the builder's bug" {
					t.Errorf("a panicking builder: recovered %v", v)
				}
			}()
			s.EnqueueEvent(ctx, "outer", func(int64) ([]byte, error) { panic("the builder's bug") })
		}()
		told := make(chan error, 1)
		if err := enqueueWithin(t, s, ctx, nestedEnqueue(s, told)); !errors.Is(err, outbox.ErrCallInsideTx) {
			t.Fatalf("a nested call after a panicking builder: %v, want ErrCallInsideTx", err)
		}
		<-told
		// And the mark is gone with the builder: this goroutine's own calls go through.
		if _, err := s.EnqueueEvent(ctx, "outer", outboxtest.LineOf("after")); err != nil {
			t.Fatalf("the store after the panic: %v", err)
		}
	})
	t.Run("after a takeover", func(t *testing.T) {
		s := openStore(t, outbox.WithOpTimeout(time.Minute))
		release := make(chan struct{})
		stuckTold := make(chan error, 1)
		stuck := func(int64) ([]byte, error) {
			<-release
			// Called once the builder returns from its wait, its group long taken over.
			_, err := s.EnqueueEvent(context.Background(), "late", outboxtest.LineOf("x"))
			stuckTold <- err
			return []byte("stuck"), nil
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := enqueueWithin(t, s, short, stuck); !errors.Is(err, outbox.ErrBuilderStuck) {
			t.Fatalf("a builder past its deadline: %v, want ErrBuilderStuck", err)
		}
		told := make(chan error, 1)
		if err := enqueueWithin(t, s, ctx, nestedEnqueue(s, told)); !errors.Is(err, outbox.ErrCallInsideTx) {
			t.Fatalf("a nested call on the goroutine that took the group over: %v, want ErrCallInsideTx", err)
		}
		<-told
		close(release)
		select {
		case err := <-stuckTold:
			// Its goroutine no longer holds the writer: whether the call is caught as nested (the mark
			// is still its own) or served, it must not wait for itself.
			t.Logf("the stuck builder's own call, once it returned: %v", err)
		case <-time.After(liveness):
			t.Fatal("the stuck builder's call, once it returned, did not return")
		}
		if _, err := s.EnqueueEvent(ctx, "outer", outboxtest.LineOf("after")); err != nil {
			t.Fatalf("the store after the takeover: %v", err)
		}
	})
}

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

// A Flush whose context ends while the batch before the one being appended is still being recorded:
// the sink has that batch, so its record goes on to the end (bounded by the operation timeout, not by
// the caller's context), and the next Flush sends nothing twice.
func TestCancellingFlushWhileARecordIsInFlightStillRecordsTheBatchTheSinkHas(t *testing.T) {
	s := openStore(t, outbox.WithBusyTimeout(time.Minute))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var release func()
	sink := &hookedSink{sink: openJournal(t, path)}
	sink.after = func(call int) {
		if call == 1 {
			release = holdWriteLock(t, s.Path())
		}
	}
	sink.before = func(call int, ctx context.Context, _ []outbox.EventLine) error {
		if call != 2 {
			return nil
		}
		cancel() // batch 1's record waits for the lock: it is in flight now
		time.AfterFunc(20*time.Millisecond, release)
		return ctx.Err()
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

// Close while batch 1 is being recorded and batch 2's append is blocked: Close waits for both (the
// append, then its record), so the next process re-sends nothing; the relay is refused the batch
// after (ErrClosed).
func TestCloseWhileARecordIsInFlightAndTheNextAppendIsBlockedRecordsBothFirst(t *testing.T) {
	opts := []outbox.Option{outbox.WithBusyTimeout(time.Minute), outbox.WithOpTimeout(time.Minute)}
	s := openStore(t, opts...)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	var release func()
	inSecond, unblock := make(chan struct{}), make(chan struct{})
	j := openJournal(t, path)
	sink := &hookedSink{sink: j}
	sink.after = func(call int) {
		if call == 1 {
			release = holdWriteLock(t, s.Path())
		}
	}
	sink.before = func(call int, _ context.Context, _ []outbox.EventLine) error {
		if call == 2 {
			close(inSecond)
			<-unblock // deaf to its context, as a slow disk is
		}
		return nil
	}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(context.Background()) }()
	<-inSecond
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close is meant to be waiting by now; if it is not, the test checks the same outcome.
	time.Sleep(50 * time.Millisecond)
	release()
	close(unblock)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-flushed; !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Flush across Close: %v, want ErrClosed", err)
	}
	s2, err := outbox.Open(context.Background(), s.Path(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	if got, err := s2.Projected(context.Background(), "run"); err != nil || got != 20 {
		t.Errorf("Projected after Close: %d, %v; want 20, both batches the sink had", got, err)
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
// the batch's record ran beside the next append or failed and was made, merged with the next batch,
// by the relay's next attempt.
func TestOnProjectedReportsOnlyRecordedBatchesInOrderAndEachLineOnce(t *testing.T) {
	for _, failRecord := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing record=%v", failRecord), func(t *testing.T) {
			s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			enqueueSpends(t, s, 30)
			var release func()
			sink := &hookedSink{sink: openJournal(t, path)}
			if failRecord {
				sink.after = func(call int) {
					if call == 1 {
						release = holdWriteLock(t, s.Path())
					}
				}
				sink.before = func(call int, _ context.Context, _ []outbox.EventLine) error {
					if call == 2 {
						time.Sleep(200 * time.Millisecond) // far past the busy timeout: batch 1's record fails
						release()
					}
					return nil
				}
			}
			rep := &projectedReports{t: t, s: s}
			r := outboxtest.FastRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithOnProjected(rep.report))
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if rep.lines != 30 || rep.last != 30 {
				t.Errorf("WithOnProjected heard of %d lines up to %d, want 30 up to 30", rep.lines, rep.last)
			}
			t.Logf("reports: %v", rep.calls)
			if v := verifyFile(t, path); v.Lines != 30 || v.Duplicates != 0 {
				t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", v.Lines, v.Duplicates)
			}
		})
	}
}

// Batch 2's append blocks, deaf to everything but its context, while batch 1's record fails. When
// the caller gives up, batch 1 is the sink's and not recorded: RetireEvent refuses its lines
// (ErrProjected), and the next Flush records it first and sends batch 2 and on, nothing twice.
func TestABlockedAppendBesideAFailedRecordLeavesTheBatchToTheNextFlushNotToRetire(t *testing.T) {
	s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	enqueueSpends(t, s, 30)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var release func()
	sink := &hookedSink{sink: openJournal(t, path)}
	sink.after = func(call int) {
		if call == 1 {
			release = holdWriteLock(t, s.Path())
		}
	}
	sink.before = func(call int, ctx context.Context, _ []outbox.EventLine) error {
		if call == 2 {
			time.AfterFunc(200*time.Millisecond, func() { release(); cancel() })
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	r := outboxtest.FastRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	if err := r.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush: %v, want context.Canceled", err)
	}
	bg := context.Background()
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
	if v := verifyFile(t, path); v.Lines != 30 || v.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 30 and 0", v.Lines, v.Duplicates)
	}
}

// slowRecords makes every commit of the store wait a moment before it commits, so that a relay's
// record runs well beside the next append, and the relays, the retirer and the producers meet it
// there.
func slowRecords(t *testing.T) {
	faultpoint.Set(func(p string) {
		if p == faultpoint.BeforeCommit {
			time.Sleep(time.Millisecond)
		}
	})
	t.Cleanup(func() { faultpoint.Set(nil) })
}

// Two relays of one run, each forgetting what it projects, take turns while their records run beside
// their appends; producers enqueue and a caller retires lines meanwhile. Each line reaches the sink
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

// The last two batches of a run reached the sink with neither recorded: the first's record failed and
// the second went out beside it. The relay's next attempt records both at once, their once keys
// included; a process that stops instead leaves both to the next start, whose Recover re-sends them,
// byte for byte, and moves all their keys into the ledger, beside the runs of other earlier processes.
// Either way no key is announced again.
func TestTwoUnrecordedBatchesOfOnceKeysAreLedgeredByTheNextAttemptOrTheNextStart(t *testing.T) {
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
			if got := sink.calls; got != 2 {
				t.Fatalf("the sink was called %d times, want 2: the batch beside the failing record, and no more", got)
			}
			release()
			wantDup := 0
			if restart {
				s = outboxtest.Reopen(t, s, outbox.WithBusyTimeout(time.Minute))
				if err := outboxtest.NewRelay(t, s, j, "next", outbox.WithBatchSize(4)).Recover(ctx); err != nil {
					t.Fatal(err)
				}
				wantDup = 20
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
	opts := []outbox.Option{outbox.WithOpTimeout(100 * time.Millisecond)}
	s := openStore(t, opts...)
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
	go func() { flushed <- r.Flush(context.Background()) }()
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
	s2, err := outbox.Open(context.Background(), s.Path(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	if got, err := s2.Projected(context.Background(), "run"); err != nil || got != 10 {
		t.Errorf("Projected after Close: %d, %v; want 10", got, err)
	}
	if err := outboxtest.NewRelay(t, s2, j, "later").Recover(context.Background()); err != nil {
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
	// the sink's failing call; up to the batch appended beside the record of the batch the callback
	// hears of, since that batch's record was already under way.
	cases := map[string]struct {
		sink      func(call int)
		callback  func(calls int)
		projected int64
	}{
		"sink panics":           {sink: func(call int) { panic("the caller's bug") }, projected: 10},
		"sink calls Goexit":     {sink: func(call int) { runtime.Goexit() }, projected: 10},
		"callback panics":       {callback: func(int) { panic("the caller's bug") }, projected: 20},
		"callback calls Goexit": {callback: func(int) { runtime.Goexit() }, projected: 20},
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

// Recover over many earlier runs, its context cancelled again and again at any moment, with records
// running beside appends: each attempt goes on where the last one stopped, and once one finishes the
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

// RetireEvent called from inside a transaction of the store while a relay of the run has a batch in
// flight: the relay holds the run's turn and waits for its record, which waits for the writer the
// transaction holds. RetireEvent fails at once with ErrCallInsideTx instead of waiting for that turn
// until the record gives up.
func TestRetireEventFromInsideATransactionFailsAtOnceWhileARelayHoldsTheTurn(t *testing.T) {
	s := openStore(t, outbox.WithOpTimeout(time.Minute), outbox.WithBusyTimeout(time.Minute))
	enqueueSpends(t, s, 30)
	inSecond, unblock := make(chan struct{}), make(chan struct{})
	sink := &hookedSink{sink: outboxtest.NewMemSink(), before: func(call int, _ context.Context, _ []outbox.EventLine) error {
		if call == 2 {
			close(inSecond)
			<-unblock
		}
		return nil
	}}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	flushed := make(chan error, 1)
	var inner error
	done := make(chan error, 1)
	go func() {
		done <- s.WriteTx(context.Background(), func(*sql.Tx) error {
			go func() { flushed <- r.Flush(context.Background()) }()
			<-inSecond // batch 1's record waits for this transaction's writer
			inner = s.RetireEvent(context.Background(), "run", 25, "attack")
			close(unblock)
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(liveness):
		t.Fatal("RetireEvent from inside WriteTx did not return")
	}
	if !errors.Is(inner, outbox.ErrCallInsideTx) {
		t.Errorf("RetireEvent from inside WriteTx: %v, want ErrCallInsideTx", inner)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
}

// The sink refuses batch 2 while batch 1's record fails: the stop is written at batch 2 all the same,
// batch 1 stays the turn's to record (RetireEvent refuses its lines), and the next attempt records
// batch 1, which clears the stop, meets the refusal again and writes the stop again: the book never
// ends up with batch 1 unrecorded and no stop while the sink refuses.
func TestARefusalBesideAFailedRecordStopsTheRunAndTheNextAttemptStopsItAgain(t *testing.T) {
	s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
	enqueueSpends(t, s, 30)
	errBad := fmt.Errorf("batch 2: %w", outbox.ErrSinkRefused)
	var release func()
	sink := &hookedSink{sink: outboxtest.NewMemSink()}
	sink.after = func(call int) {
		if call == 1 {
			release = holdWriteLock(t, s.Path())
		}
	}
	sink.before = func(call int, _ context.Context, _ []outbox.EventLine) error {
		if call < 2 {
			return nil
		}
		if call == 2 {
			time.Sleep(200 * time.Millisecond) // far past the busy timeout: batch 1's record fails
			release()
		}
		return errBad
	}
	r := outboxtest.FastRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithFlushAttempts(1))
	ctx := context.Background()
	if err := r.Flush(ctx); !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush: %v, want ErrSinkRefused", err)
	}
	if st := runStats(t, s, "run"); st.Projected != 0 || st.StoppedSeq != 11 {
		t.Errorf("after the refusal: projected %d, stopped at %d; want 0 and 11", st.Projected, st.StoppedSeq)
	}
	if err := s.RetireEvent(ctx, "run", 10, "attack"); !errors.Is(err, outbox.ErrProjected) {
		t.Errorf("RetireEvent of a line of the unrecorded batch: %v, want ErrProjected", err)
	}
	if err := r.Flush(ctx); !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("the next Flush: %v, want ErrSinkRefused", err)
	}
	if st := runStats(t, s, "run"); st.Projected != 10 || st.StoppedSeq != 11 {
		t.Errorf("after the next attempt: projected %d, stopped at %d; want 10 and 11", st.Projected, st.StoppedSeq)
	}
}
