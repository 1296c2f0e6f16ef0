// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// Close, called while the sink appends a batch, waits until the batch is recorded; the relay then
// appends nothing more, and the next process re-sends nothing. Without the wait, the batch landed
// after Close had returned, its record failed on the closed store, and the next start sent it again.
func TestCloseDuringADrainWaitsForTheBatchInFlightAndNothingIsSentAgain(t *testing.T) {
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

// Close waits for a batch in flight only up to the operation timeout: a sink that never answers
// cannot hang it.
func TestCloseWaitsForAStuckSinkOnlyUpToTheOpTimeout(t *testing.T) {
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

// Close at a random moment of a drain, by Run or by Flush, with or without another relay of the run:
// after Close returns nothing more reaches the sink, and the next process's Flush completes the
// journal with no line sent twice.
func TestCloseAtAnyMomentOfADrainLeavesNothingToSendAgain(t *testing.T) {
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
