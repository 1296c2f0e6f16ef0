// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// openWithBacklog opens a store at path holding n lines of run "run".
func openWithBacklog(t testing.TB, path string, n int) *outbox.Store {
	t.Helper()
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	enqueueSpends(t, s, n)
	return s
}

// enqueueSpends enqueues n journal lines of run "run" in one transaction.
func enqueueSpends(t testing.TB, s *outbox.Store, n int) {
	t.Helper()
	builds := make([]outbox.EventBuilder, n)
	for i := range builds {
		builds[i] = journal.Builder("run", "spend", map[string]int{"i": i})
	}
	if _, err := s.EnqueueEvents(outboxtest.Patient(t), "run", builds); err != nil {
		t.Fatal(err)
	}
}

func openJournal(t testing.TB, path string) *journal.File {
	t.Helper()
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func verifyFile(t testing.TB, path string) journal.Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// Eight relays of one store project the same run while four producers enqueue to it: they take
// turns, so the journal holds each of the 6,000 lines once. Without turns, two relays read the same
// position and both appended the batch after it (2,218 duplicates in 20,000 lines, one line in
// nine: 6,000 lines are plenty to show it, and the relays' polling, which lasts as long as the
// producers do, costs under the race detector in proportion to the lines).
func TestRelaysOfOneStoreProjectingOneRunAppendEachLineOnce(t *testing.T) {
	const producers, perProducer, relays = 4, 1500, 8
	ctx := context.Background()
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j := openJournal(t, path)
	if _, err := s.EnqueueEvent(ctx, "run", journal.Handshake("run", nil)); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, relays+producers)
	for i := range relays {
		r := outboxtest.NewRelay(t, s, j, "run", outbox.WithBatchSize(16+i*8), outbox.WithPollInterval(time.Millisecond))
		wg.Go(func() {
			if i%2 == 0 {
				if err := r.Run(runCtx); !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("relay %d: Run: %w", i, err)
				}
				return
			}
			for runCtx.Err() == nil {
				if err := r.Flush(runCtx); err != nil && runCtx.Err() == nil {
					errs <- fmt.Errorf("relay %d: Flush: %w", i, err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	var pw sync.WaitGroup
	for p := range producers {
		pw.Go(func() {
			for i := 0; i < perProducer; i += 10 {
				builds := make([]outbox.EventBuilder, 10)
				for k := range builds {
					builds[k] = journal.Builder("run", "spend", map[string]int{"producer": p, "i": i + k})
				}
				if _, err := s.EnqueueEvents(ctx, "run", builds); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	pw.Wait()
	if err := outboxtest.NewRelay(t, s, j, "run").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rep := verifyFile(t, path)
	if want := 1 + producers*perProducer; rep.Lines != want || rep.Duplicates != 0 {
		t.Fatalf("the journal holds %d lines and %d duplicates, want %d and 0", rep.Lines, rep.Duplicates, want)
	}
}

// gatedSink is a journal whose appends can be held: the nth append (1-based) signals held and waits
// for release. It counts appends that start or end after the store's Close has returned.
type gatedSink struct {
	j        *journal.File
	n        int
	held     chan struct{}
	release  chan struct{}
	calls    atomic.Int64
	active   atomic.Int64
	closed   atomic.Bool
	late     atomic.Int64 // appends begun after Close returned
	lines    atomic.Int64
	failNext atomic.Bool
}

func newGatedSink(j *journal.File, n int) *gatedSink {
	return &gatedSink{j: j, n: n, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if g.closed.Load() {
		g.late.Add(1)
	}
	g.active.Add(1)
	defer g.active.Add(-1)
	if g.calls.Add(1) == int64(g.n) {
		close(g.held)
		<-g.release
	}
	if err := g.j.Append(ctx, runID, lines); err != nil {
		return err
	}
	g.lines.Add(int64(len(lines)))
	return nil
}

// stuckSink never returns from Append until its context ends or it is let go.
type stuckSink struct {
	entered chan struct{}
	free    chan struct{}
	once    sync.Once
}

func (s *stuckSink) Append(ctx context.Context, _ string, _ []outbox.EventLine) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.free:
		return nil
	}
}

// stuckRelay opens a store with an operation timeout of 200 ms and one line of run "run", and starts a
// relay's Flush into a stuckSink; it returns once the sink holds the batch. Close the sink's free.
func stuckRelay(t *testing.T) (*outbox.Store, *stuckSink, <-chan error) {
	t.Helper()
	// The setup's calls have a deadline of their own, so that the short timeout bounds what is tested
	// (Close's wait for the batch in flight, the record), not Open's migrations, the enqueue or the
	// Flush's reads on a loaded machine.
	ctx := outboxtest.Patient(t)
	s, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"), outbox.WithOpTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "run", journal.Handshake("run", nil)); err != nil {
		t.Fatal(err)
	}
	sink := &stuckSink{entered: make(chan struct{}), free: make(chan struct{})}
	flushed := make(chan error, 1)
	relay := outboxtest.NewRelay(t, s, sink, "run")
	go func() { flushed <- relay.Flush(ctx) }()
	<-sink.entered
	return s, sink, flushed
}

// A relay waiting for a run's turn, while another relay's batch is stuck in its sink, gives up when
// its own context ends, and a relay waiting when Close begins returns ErrClosed.
func TestARelayWaitingForItsTurnGivesUpWithItsContextOrWhenTheStoreCloses(t *testing.T) {
	ctx := outboxtest.Patient(t) // the store's short operation timeout is for the stuck batch's record
	s, sink, _ := stuckRelay(t)
	defer close(sink.free)

	waiting := outboxtest.NewRelay(t, s, &batchSink{}, "run")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := waiting.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush while another relay has the turn: %v, want DeadlineExceeded", err)
	}
	// Another run is not held up.
	if _, err := s.EnqueueEvent(ctx, "other", journal.Handshake("other", nil)); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, &batchSink{}, "other").Flush(ctx); err != nil {
		t.Fatalf("Flush of another run: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- waiting.Flush(ctx) }()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Flush waiting for its turn across Close: %v, want ErrClosed", err)
	}
}

// afterAppend appends and then calls after, if set, while the batch is in the journal and not yet
// recorded.
type afterAppend struct {
	j     *journal.File
	after func()
	lines atomic.Int64
}

func (c *afterAppend) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if err := c.j.Append(ctx, runID, lines); err != nil {
		return err
	}
	c.lines.Add(int64(len(lines)))
	if c.after != nil {
		c.after()
	}
	return nil
}

// When a relay's record fails after its append (another program holds the database's write lock
// past the busy timeout), another relay of the store that takes the run's turn records that batch
// instead of appending it again.
func TestAnotherRelayRecordsABatchWhoseRecordFailedInsteadOfSendingItAgain(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, outbox.WithBusyTimeout(time.Millisecond))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j := openJournal(t, path)
	const backlog = 50
	enqueueSpends(t, s, backlog)
	var held *sql.Tx
	sink := &afterAppend{j: j, after: func() {
		if held != nil {
			return // the lock is held from the first batch on: the relay appends the next one beside that batch's record
		}
		var err error
		if held, err = outboxtest.RawDBRW(t, s.Path()).Begin(); err == nil {
			_, err = held.Exec(`UPDATE outbox_progress SET projected = projected WHERE 0`)
		}
		if err != nil {
			t.Error(err)
		}
	}}
	if err := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(20), outbox.WithFlushAttempts(1)).Flush(ctx); err == nil {
		t.Fatal("Flush whose record met a foreign write lock succeeded")
	}
	if err := held.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Projected(ctx, "run"); err != nil || got != 0 {
		t.Fatalf("Projected after the failed record: %d, %v; want 0", got, err)
	}
	second := &afterAppend{j: j}
	if err := outboxtest.NewRelay(t, s, second, "run", outbox.WithBatchSize(20)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.lines.Load() + second.lines.Load(); got != int64(backlog) {
		t.Errorf("the sinks got %d lines in all, want %d", got, backlog)
	}
	if rep := verifyFile(t, path); rep.Lines != backlog || rep.Duplicates != 0 {
		t.Fatalf("the journal holds %d lines and %d duplicates, want %d and 0", rep.Lines, rep.Duplicates, backlog)
	}
}

// closeRounds is how many drains TestCloseAtAnyMomentOfADrainLeavesNothingToSendAgain closes: a dozen in
// make test, OUTBOX_RELAY_CLOSE_ROUNDS in make reliability.
func closeRounds(t *testing.T) int { return envCount(t, "OUTBOX_RELAY_CLOSE_ROUNDS", 12) }

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
