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
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestRelayAppendsBoundedBatchesThenRecordsProgressAndOnceKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 10; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	ok, onceSeq, _ := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done"))
	if !ok {
		t.Fatal("EnqueueOnce did not enqueue")
	}
	stored := outboxtest.AllLines(t, s, "r")
	sink := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchSize(4), outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{4, 4, 3}, sink.Tried()); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(stored, sink.All()); diff != "" {
		t.Errorf("sink content differs from the store (-store +sink):\n%s", diff)
	}
	if p, _ := s.Projected(ctx, "r"); p != 11 {
		t.Errorf("Projected = %d, want 11", p)
	}
	ledger, _ := s.AnnouncedOnceKeys(ctx)
	if diff := cmp.Diff(map[string]bool{"unit:1": true}, ledger); diff != "" {
		t.Errorf("ledger after projecting seq %d (-want +got):\n%s", onceSeq, diff)
	}
}

func TestAFailingSinkIsRetriedWithTheSameBytesAndBoundedReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 40; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	sink := outboxtest.NewMemSink()
	sink.SetFailing(true)
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchSize(8), outbox.WithFlushAttempts(3))
	err := relay.Flush(ctx)
	if !errors.Is(err, outboxtest.ErrSinkDown) {
		t.Fatalf("Flush with a failing sink: %v, want the sink's error", err)
	}
	// Three attempts, each offered the same first batch and no more than the batch size.
	if diff := cmp.Diff([]int{8, 8, 8}, sink.Tried()); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if p, _ := s.Projected(ctx, "r"); p != 0 {
		t.Errorf("Projected = %d after failures, want 0", p)
	}
	sink.SetFailing(false)
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 40), outboxtest.SeqsOf(sink.All())); diff != "" {
		t.Errorf("sink seqs: nothing twice, nothing skipped (-want +got):\n%s", diff)
	}
}

func TestRunProjectsPromptlyOnCommitAndStopsWithItsContext(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	sink := outboxtest.NewMemSink()
	// An hour's poll: only the store's commit signal can wake the relay in time.
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithPollInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	for i := int64(1); i <= 3; i++ {
		outboxtest.MustEnqueue(t, s, "r")
		deadline := time.After(10 * time.Second)
		for int64(len(sink.All())) < i {
			select {
			case <-sink.Got():
			case <-deadline:
				t.Fatalf("event %d not projected", i)
			}
		}
	}
	// A sink outage: Run keeps the lines and delivers them once the sink is back.
	sink.SetFailing(true)
	outboxtest.MustEnqueue(t, s, "r")
	time.Sleep(20 * time.Millisecond)
	sink.SetFailing(false)
	deadline := time.After(10 * time.Second)
	for len(sink.All()) < 4 {
		select {
		case <-sink.Got():
		case <-deadline:
			t.Fatal("event 4 not projected after the sink recovered")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 4), outboxtest.SeqsOf(sink.All())); diff != "" {
		t.Errorf("sink seqs (-want +got):\n%s", diff)
	}
}

func TestFlushReturnsOnlyWhenEverythingCommittedIsInTheSinkAndRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	sink := outboxtest.NewMemSink()
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchSize(3))
	if err := relay.Flush(ctx); err != nil {
		t.Errorf("Flush of an empty run: %v", err)
	}
	for i := 0; i < 10; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(sink.All()); got != 10 {
		t.Errorf("sink has %d lines, want 10", got)
	}
	if p, _ := s.Projected(ctx, "r"); p != 10 {
		t.Errorf("Projected = %d, want 10", p)
	}
}

func TestEnqueueOnceRefusesAKeyStillPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	ok, seq, err := s.EnqueueOnce(ctx, "old", "unit:1", outboxtest.LineOf("done"))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	// Enqueued, not yet marked: a second announcement, from this run or the next, is refused.
	for _, run := range []string{"old", "new"} {
		ok, seq2, err := s.EnqueueOnce(ctx, run, "unit:1", outboxtest.LineOf("done"))
		if ok || seq2 != 0 || err != nil {
			t.Errorf("EnqueueOnce(%q) of a pending key = (%v, %d, %v), want (false, 0, nil)", run, ok, seq2, err)
		}
	}
	if ledger, _ := s.AnnouncedOnceKeys(ctx); len(ledger) != 0 {
		t.Errorf("a pending key is in the ledger: %v", ledger)
	}
	// The original API still marks it.
	if err := s.MarkAnnounced(ctx, "old", map[int64]string{seq: "unit:1"}); err != nil {
		t.Errorf("MarkAnnounced of the pending key: %v", err)
	}
	if err := s.MarkAnnounced(ctx, "old", map[int64]string{seq: "unit:other"}); !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("MarkAnnounced with another key: %v, want ErrAnnounceConflict", err)
	}
}

func TestRecoverProjectsEarlierRunsThenForgetsThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	jpath := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := journal.OpenFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()

	// Run "old" projected its first 3 lines and died with 4 more committed, one of them an
	// announcement, one of them in a caller's transaction.
	ev := func(kind string) outbox.EventBuilder { return journal.Builder("old", kind, nil) }
	enq := func(kind string) {
		if _, err := s.EnqueueEvent(ctx, "old", ev(kind)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		enq("x")
	}
	if err := outboxtest.FastRelay(t, s, j, "old", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	enq("x")
	_, onceSeq, _ := s.EnqueueOnce(ctx, "old", "unit:7", ev("unit_done"))
	s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := s.EnqueueTx(ctx, tx, "old", ev("spend")); return err })
	enq("x")
	want := outboxtest.AllLines(t, s, "old")

	s = outboxtest.Reopen(t, s)
	if err := outboxtest.FastRelay(t, s, j, "new", outbox.WithBatchSize(2)).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(jpath)
	gotLines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	var wantLines []string
	for _, l := range want {
		wantLines = append(wantLines, string(l.Line))
	}
	if diff := cmp.Diff(wantLines, gotLines); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
	ledger, _ := s.AnnouncedOnceKeys(ctx)
	if !ledger["unit:7"] {
		t.Errorf("unit:7 (seq %d) not in the ledger after Recover: %v", onceSeq, ledger)
	}
	// Forgotten after: only the ledger row of "old" is left, and its progress with it; the row keeps
	// the key and the line's digest, not the line, so no line of old is stored.
	if lines := outboxtest.AllLines(t, s, "old"); len(lines) != 0 {
		t.Errorf("lines of old stored after Recover: %v", outboxtest.SeqsOf(lines))
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
	if ok, _, _ := s.EnqueueOnce(ctx, "new", "unit:7", outboxtest.LineOf("done")); ok {
		t.Error("unit:7 announced again after Recover")
	}
	// A second Recover, by the run after, sends nothing again.
	before, _ := os.ReadFile(jpath)
	if err := outboxtest.FastRelay(t, s, j, "newer").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(jpath)
	if !bytes.Equal(before, after) {
		t.Errorf("a second Recover re-sent lines:\n%s", after[len(before):])
	}
	if _, err := journal.Verify(bytes.NewReader(after)); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

// TestProgressAndTheLastSeqSurviveForgetEvents: a run whose rows ForgetEvents dropped keeps its
// progress and its last seq, so its ledger rows are never re-sent and its next event does not reuse a
// number.
func TestProgressAndTheLastSeqSurviveForgetEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "old")
	s.EnqueueOnce(ctx, "old", "unit:1", outboxtest.LineOf("done"))
	outboxtest.MustEnqueue(t, s, "old")
	outboxtest.MustEnqueue(t, s, "gone")
	sink := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sink, "old").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.FastRelay(t, s, sink, "gone").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForgetEvents(ctx, "current"); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Projected(ctx, "old"); p != 3 {
		t.Errorf("progress of a run with a ledger row = %d, want 3", p)
	}
	if p, _ := s.Projected(ctx, "gone"); p != 1 {
		t.Errorf("progress of a run without rows = %d, want 1 (kept)", p)
	}
	if seq, err := s.EnqueueEvent(ctx, "gone", outboxtest.LineOf("again")); err != nil || seq != 2 {
		t.Errorf("next event of a forgotten run: (%d, %v), want seq 2", seq, err)
	}
	// Its ledger row is never offered again.
	n := len(sink.All())
	if err := outboxtest.FastRelay(t, s, sink, "current").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.All()) != n {
		t.Errorf("Recover re-sent %d ledger lines", len(sink.All())-n)
	}
}

func TestRelayRefusesToProjectAcrossMissingRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		outboxtest.MustEnqueue(t, s, "old")
	}
	d := outboxtest.RawDBRW(t, path)
	if _, err := d.Exec(`DELETE FROM events_outbox WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	s = outboxtest.Reopen(t, s)
	sink := outboxtest.NewMemSink()
	err := outboxtest.FastRelay(t, s, sink, "new").Recover(ctx)
	if !errors.Is(err, outbox.ErrRowsMissing) {
		t.Errorf("Recover over a hole: %v, want ErrRowsMissing", err)
	}
	if diff := cmp.Diff([]int64{1}, outboxtest.SeqsOf(sink.All())); diff != "" {
		t.Errorf("sink (-want +got):\n%s", diff)
	}
}

func TestNewRelayFailsAtConstructionOnABadArgumentOrOption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	ro, err := outbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	sink := outboxtest.NewMemSink()
	for name, c := range map[string]struct {
		s    *outbox.Store
		sink outbox.Sink
		run  string
		opts []outbox.RelayOption
		want error
	}{
		"nil store":     {nil, sink, "r", nil, nil},
		"nil sink":      {s, nil, "r", nil, nil},
		"read-only":     {ro, sink, "r", nil, outbox.ErrReadOnly},
		"empty run":     {s, sink, "", nil, outbox.ErrInvalidRunID},
		"control byte":  {s, sink, "a\x00b", nil, outbox.ErrInvalidRunID},
		"invalid UTF-8": {s, sink, "\xff", nil, outbox.ErrInvalidRunID},
		"batch 0":       {s, sink, "r", []outbox.RelayOption{outbox.WithBatchSize(0)}, nil},
		"bytes 0":       {s, sink, "r", []outbox.RelayOption{outbox.WithBatchBytes(0)}, nil},
		"backoff":       {s, sink, "r", []outbox.RelayOption{outbox.WithBackoff(time.Second, time.Millisecond)}, nil},
		"attempts 0":    {s, sink, "r", []outbox.RelayOption{outbox.WithFlushAttempts(0)}, nil},
		"poll 0":        {s, sink, "r", []outbox.RelayOption{outbox.WithPollInterval(0)}, nil},
	} {
		r, err := outbox.NewRelay(c.s, c.sink, c.run, c.opts...)
		if err == nil || r != nil {
			t.Errorf("%s: NewRelay gave %v, %v; want an error and no relay", name, r, err)
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", name, err, c.want)
		}
	}
	if r, err := outbox.NewRelay(s, sink, "r", nil, outbox.WithBatchSize(1)); err != nil || r == nil {
		t.Errorf("good arguments (a nil option among them): %v, %v", r, err)
	}
}

func TestJournalBuilderRendersTheFormatAndStoresTheTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	if _, err := s.EnqueueEvent(ctx, "run-1", journal.Handshake("run-1", map[string]string{"book": "b"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "spend", map[string]int{"amount": 5})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "bad", make(chan int))); err == nil {
		t.Error("an unencodable data value was enqueued")
	}
	got := outboxtest.AllLines(t, s, "run-1")
	if len(got) != 2 {
		t.Fatalf("%d lines", len(got))
	}
	re := `^\{"engine_run_id":"run-1","seq":1,"type":"run_started","at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z","data":\{"book":"b"\}\}$`
	if !regexp.MustCompile(re).MatchString(string(got[0].Line)) {
		t.Errorf("handshake = %s", got[0].Line)
	}
	var buf bytes.Buffer
	for _, l := range got {
		buf.Write(l.Line)
		buf.WriteByte('\n')
	}
	rep, err := journal.Verify(&buf)
	if err != nil || rep.Runs["run-1"].Last != 2 {
		t.Errorf("Verify: (%+v, %v)", rep, err)
	}
	// Stored bytes are what a re-delivery sends: a second read is identical.
	again := outboxtest.AllLines(t, s, "run-1")
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("second read differs:\n%s", diff)
	}
}

type refusingSink struct{ calls int }

func (s *refusingSink) Append(context.Context, string, []outbox.EventLine) error {
	s.calls++
	return fmt.Errorf("destination holds other bytes: %w", outbox.ErrSinkRefused)
}

func TestASinksRefusalStopsTheRelayWithoutRetrying(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	sink := &refusingSink{}
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithFlushAttempts(5))
	if err := relay.Flush(context.Background()); !errors.Is(err, outbox.ErrSinkRefused) || sink.calls != 1 {
		t.Errorf("Flush: %v after %d calls, want ErrSinkRefused after 1", err, sink.calls)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept retrying a refused batch")
	}
}

// sizedSink is a MemSink that asks for batches of its own size.
type sizedSink struct {
	*outboxtest.MemSink
	size int
}

func (s sizedSink) BatchSize() int { return s.size }

// TestARelayTakesTheBatchSizeItsSinkAsksFor: a sink that is a BatchSizer gets batches of its size
// unless WithBatchSize says otherwise.
func TestARelayTakesTheBatchSizeItsSinkAsksFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for run, tc := range map[string]struct {
		opts []outbox.RelayOption
		want int
	}{"asked": {nil, 3}, "told": {[]outbox.RelayOption{outbox.WithBatchSize(4)}, 4}} {
		if _, err := s.EnqueueEvents(ctx, run, slices.Repeat([]outbox.EventBuilder{outboxtest.LineOf("x")}, 10)); err != nil {
			t.Fatal(err)
		}
		sink := sizedSink{outboxtest.NewMemSink(), 3}
		if err := outboxtest.FastRelay(t, s, sink, run, tc.opts...).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := sink.Tried(); len(got) == 0 || got[0] != tc.want {
			t.Errorf("%s: batches %v, want the first of %d lines", run, got, tc.want)
		}
	}
}

// failingOn is a sink that fails the Append calls whose numbers (from 1) it is given, and keeps the
// lines of every other one.
type failingOn struct {
	outboxtest.MemSink
	mu    sync.Mutex
	calls int
	fail  map[int]bool
}

func (f *failingOn) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	f.mu.Lock()
	f.calls++
	fail := f.fail[f.calls]
	f.mu.Unlock()
	if fail {
		return outboxtest.ErrSinkDown
	}
	return f.MemSink.Append(ctx, runID, lines)
}

// TestASinkFailingOnTheSecondAndThirdBatchesGetsEveryLineOnceInOrder: with batches of one line, the
// first batch read directly, the second as the reader ahead starts, the third from the reader ahead;
// failing the 2nd and 3rd appends, while more lines are enqueued during the drain, neither skips nor
// repeats a line, and Flush returns once everything before it is in the sink.
func TestASinkFailingOnTheSecondAndThirdBatchesGetsEveryLineOnceInOrder(t *testing.T) {
	for _, batchBytes := range []int{1, 40, 100} {
		t.Run(fmt.Sprint(batchBytes), func(t *testing.T) {
			s, _ := outboxtest.Setup(t)
			ctx := context.Background()
			for range 10 {
				outboxtest.MustEnqueue(t, s, "r")
			}
			sink := &failingOn{MemSink: *outboxtest.NewMemSink(), fail: map[int]bool{2: true, 3: true}}
			r := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchBytes(batchBytes), outbox.WithFlushAttempts(3), outbox.WithForgetProjected(false))
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 10 {
					outboxtest.MustEnqueue(t, s, "r")
				}
			}()
			if err := r.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			// Flush's target is at least the ten lines committed before it.
			if got, err := s.Projected(ctx, "r"); err != nil || got < 10 {
				t.Fatalf("Projected = %d, %v after Flush; want at least 10", got, err)
			}
			<-done
			if err := r.Flush(ctx); err != nil {
				t.Fatalf("second Flush: %v", err)
			}
			got := sink.All()
			want := outboxtest.AllLines(t, s, "r")
			if len(got) != 20 || len(want) != 20 {
				t.Fatalf("sink has %v, store %v; want 1..20 in each", outboxtest.SeqsOf(got), outboxtest.SeqsOf(want))
			}
			for i := range got {
				if got[i].Seq != int64(i+1) || string(got[i].Line) != string(want[i].Line) {
					t.Fatalf("sink line %d is %d %q, want %d %q", i, got[i].Seq, got[i].Line, want[i].Seq, want[i].Line)
				}
			}
		})
	}
}

// TestAHoleReachedByTheReaderAheadStopsTheDrainBeforeIt: rows deleted by hand in the middle of a long
// backlog are met by the reader ahead, mid-batch or at a batch's front, at every batch size: the sink
// gets exactly the lines before the hole, once each and in order, the position stops there, and the
// drain fails with ErrRowsMissing, the package named once.
func TestAHoleReachedByTheReaderAheadStopsTheDrainBeforeIt(t *testing.T) {
	for _, c := range []struct{ size, bytes int }{{1, 1 << 20}, {3, 1 << 20}, {256, 1}, {256, 70}, {4, 45}} {
		t.Run(fmt.Sprintf("size=%d,bytes=%d", c.size, c.bytes), func(t *testing.T) {
			s, _ := outboxtest.Setup(t)
			ctx := context.Background()
			for range 40 {
				outboxtest.MustEnqueue(t, s, "r")
			}
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`DELETE FROM events_outbox WHERE seq IN (23, 24)`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			sink := outboxtest.NewMemSink()
			r := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchSize(c.size), outbox.WithBatchBytes(c.bytes))
			err := r.Flush(ctx)
			if !errors.Is(err, outbox.ErrRowsMissing) {
				t.Fatalf("Flush over a hole: %v, want ErrRowsMissing", err)
			}
			if n := strings.Count(err.Error(), "outbox:"); n != 1 {
				t.Errorf("%q names the package %d times", err, n)
			}
			if got := outboxtest.SeqsOf(sink.All()); fmt.Sprint(got) != fmt.Sprint(outboxtest.SeqRange(1, 22)) {
				t.Errorf("sink has %v, want 1..22", got)
			}
			if got, err := s.Projected(ctx, "r"); got != 22 || err != nil {
				t.Errorf("Projected = %d, %v; want 22", got, err)
			}
			// Again: nothing is sent twice.
			if err := r.Flush(ctx); !errors.Is(err, outbox.ErrRowsMissing) {
				t.Errorf("second Flush: %v", err)
			}
			if n := len(sink.All()); n != 22 {
				t.Errorf("sink has %d lines after the second Flush, want 22", n)
			}
		})
	}
}

// TestARelayOnAReadOnlyStoreIsRefused: it could append but never record, so every attempt would send
// its batch again.
func TestARelayOnAReadOnlyStoreIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	ro, err := outbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	sink := outboxtest.NewMemSink()
	if r, err := outbox.NewRelay(ro, sink, "r"); r != nil || !errors.Is(err, outbox.ErrReadOnly) {
		t.Errorf("NewRelay on a read-only store: %v, want ErrReadOnly", err)
	}
	if len(sink.All()) != 0 {
		t.Error("a relay on a read-only store appended")
	}
}

func TestASecondRunOfARelayAlreadyRunningReturnsErrRelayRunning(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	sink := outboxtest.NewMemSink()
	relay := outboxtest.FastRelay(t, s, sink, "r")
	waitFor := func(n int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for len(sink.All()) < n {
			select {
			case <-sink.Got():
			case <-deadline:
				t.Fatalf("line %d not projected", n)
			}
		}
	}
	run := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() { done <- relay.Run(ctx) }()
		return done
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := run(ctx)
	// A line the first Run projects: from here on it is under way.
	outboxtest.MustEnqueue(t, s, "r")
	waitFor(1)

	// The bound only ends the call when the second Run runs as well: it then returns its context's
	// error instead of ErrRelayRunning.
	second, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := relay.Run(second); !errors.Is(err, outbox.ErrRelayRunning) {
		t.Fatalf("a second Run while the first runs returned %v, want ErrRelayRunning", err)
	}
	// The first goes on projecting.
	outboxtest.MustEnqueue(t, s, "r")
	waitFor(2)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first Run returned %v, want context.Canceled", err)
	}

	// Once the first has returned, Run works again.
	ctx, cancel = context.WithCancel(context.Background())
	again := run(ctx)
	outboxtest.MustEnqueue(t, s, "r")
	waitFor(3)
	cancel()
	if err := <-again; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after the first returned gave %v, want context.Canceled", err)
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 3), outboxtest.SeqsOf(sink.All())); diff != "" {
		t.Errorf("sink seqs: nothing twice, nothing skipped (-want +got):\n%s", diff)
	}
}
