// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

// lineKeyFixer is a journal sink for lines rendered by lineOf, which carry no run id: it adds it.
type lineKeyFixer struct{ j *journal.File }

func (f *lineKeyFixer) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	out := make([]outbox.EventLine, len(lines))
	for i, l := range lines {
		out[i] = outbox.EventLine{Seq: l.Seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,%s`, runID, l.Line[1:])}
	}
	return f.j.Append(ctx, runID, out)
}

// TestARecordThatFailsAfterTheAppendIsRetriedAlone: the store refuses the relay's record of a batch
// the sink already has, first for a while (another connection holds the write lock), then for good
// (the ledger would give a key to two lines); the sink gets the batch once, and the relay stops with
// the permanent error instead of appending the batch again and again.
func TestARecordThatFailsAfterTheAppendIsRetriedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t, outbox.WithBusyTimeout(5*time.Millisecond))
	outboxtest.MustEnqueue(t, s, "r")
	outboxtest.MustEnqueue(t, s, "r")
	sink := outboxtest.NewMemSink()
	locker := outboxtest.RawDBRW(t, path)
	conn, err := locker.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var appended atomic.Int32
	counting := sinkFunc(func(ctx context.Context, runID string, lines []outbox.EventLine) error {
		if appended.Add(1) == 1 {
			// The store's record of this batch will find the database locked.
			if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
				return err
			}
			time.AfterFunc(50*time.Millisecond, func() { conn.ExecContext(context.Background(), `ROLLBACK`) })
		}
		return sink.Append(ctx, runID, lines)
	})
	if err := outboxtest.FastRelay(t, s, counting, "r", outbox.WithFlushAttempts(50), outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatalf("Flush over a locked record: %v", err)
	}
	if got := outboxtest.SeqsOf(sink.All()); len(got) != 2 {
		t.Errorf("sink got %v, want the batch once", got)
	}

	// A permanent refusal: a hand-edited ledger gives line 3's pending key to line 1 already.
	if _, _, err := s.EnqueueOnce(ctx, "r", "K", outboxtest.LineOf("once")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `UPDATE events_outbox SET once_key = 'K' WHERE engine_run_id = 'r' AND seq = 1`); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = outboxtest.FastRelay(t, s, counting, "r").Run(rctx)
	if !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("Run over a record the ledger refuses: %v, want ErrAnnounceConflict", err)
	}
	if got := outboxtest.SeqsOf(sink.All()); len(got) != 3 {
		t.Errorf("sink got %v, want line 3 once", got)
	}
}
