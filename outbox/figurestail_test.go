// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// tailOf is how many of run's lines its row of figures does not hold yet (migrations/00010): the rows
// the store enqueued after the row's counted_to.
func tailOf(t *testing.T, path, run string) int {
	t.Helper()
	var n int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_outbox AS e
		JOIN outbox_runs AS r ON r.engine_run_id = e.engine_run_id
		WHERE e.engine_run_id = ? AND e.seq > r.counted_to AND e.counted = 1`, run).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func statsFigures(st outbox.RunStats) string {
	return fmt.Sprintf("last %d, projected %d, %d lines, %d in the ledger", st.LastSeq, st.Projected, st.Lines, st.LedgerLines)
}

// checkReadersExact compares what every reader of the figures reports, Run, RunOf, EveryRun,
// AllRuns, OpenRuns and Totals, with what the rows and positions show.
func checkReadersExact(t *testing.T, s *outbox.Store, path, step string) {
	t.Helper()
	ctx := outboxtest.Patient(t)
	want := figuresFromRows(t, path)
	every := map[string]string{}
	var sum outbox.BookTotals
	for st, err := range s.EveryRun(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		every[st.RunID] = statsFigures(st)
		sum.Runs++
		sum.Lines += st.Lines
		sum.LedgerKeys += st.LedgerLines
		sum.Pending += st.Pending
		sum.EnqueuedTotal += st.EnqueuedTotal
		sum.ProjectedTotal += st.ProjectedTotal
		if st.Lines > 0 {
			sum.RunsWithRows++
		}
		one, err := s.Run(ctx, st.RunID)
		if err != nil {
			t.Fatal(err)
		}
		of, ok, err := s.RunOf(ctx, st.RunID)
		if err != nil || !ok {
			t.Fatalf("RunOf %s: %v, %v", st.RunID, ok, err)
		}
		if statsFigures(one) != every[st.RunID] || statsFigures(of) != every[st.RunID] {
			t.Errorf("after %s, run %s: Run %s, RunOf %s, EveryRun %s", step, st.RunID, statsFigures(one), statsFigures(of), every[st.RunID])
		}
	}
	if diff := cmp.Diff(want, every); diff != "" {
		t.Errorf("after %s, EveryRun differs from the rows (-rows +EveryRun):\n%s", step, diff)
	}
	for st, err := range s.AllRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if st.Lines == 0 || statsFigures(st) != want[st.RunID] {
			t.Errorf("after %s, AllRuns lists %s as %s; the rows show %s", step, st.RunID, statsFigures(st), want[st.RunID])
		}
	}
	for st, err := range s.OpenRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if statsFigures(st) != want[st.RunID] {
			t.Errorf("after %s, OpenRuns lists %s as %s; the rows show %s", step, st.RunID, statsFigures(st), want[st.RunID])
		}
	}
	tot, err := s.Totals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tot.StoppedRuns = 0
	if diff := cmp.Diff(sum, tot); diff != "" {
		t.Errorf("after %s, Totals differ from the sums of the runs (-runs +Totals):\n%s", step, diff)
	}
}

// TestASingleEventCommitWritesOnlyTheEventsPageNotTheRunsRow: an enqueue of one event to a run that
// has its row of figures writes no page of the figures' table: the line is its run's tail, which
// every reader adds, and the figures they report are exact after each commit. The row was written
// by every commit, one page beside the event's own.
func TestASingleEventCommitWritesOnlyTheEventsPageNotTheRunsRow(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t, outbox.WithDurability(outbox.DurabilityNormal))
	outboxtest.MustEnqueue(t, s, "run")
	outboxtest.MustEnqueue(t, s, "other")
	var runs uint32
	if err := outboxtest.RawDB(t, path).QueryRow(
		`SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = 'outbox_runs'`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for try := 0; ; try++ {
			_, m, _ := walPagesSince(t, path, walMark{})
			if _, err := s.EnqueueEvent(ctx, "run", outboxtest.LineOf("x")); err != nil {
				t.Fatal(err)
			}
			pages, _, same := walPagesSince(t, path, m)
			if !same {
				if try == 3 {
					t.Fatalf("enqueue %d: the WAL restarted at every try", i)
				}
				continue // a checkpoint restarted the WAL: the pages of this commit are not all told
			}
			if len(pages) == 0 {
				t.Fatalf("enqueue %d wrote no frame", i)
			}
			if slices.Contains(pages, runs) {
				t.Errorf("enqueue %d wrote the page of the runs' figures (page %d; pages %v)", i, runs, pages)
			}
			break
		}
		checkReadersExact(t, s, path, fmt.Sprintf("enqueue %d", i))
	}
	if n := tailOf(t, path, "run"); n == 0 {
		t.Error("no line of run is in its tail: the commits wrote its row")
	}
}

// TestARunsTailIsFoldedIntoItsRowOnceItReachesItsBound: single enqueues to a run leave its row of
// figures alone until the tail would reach 256 seqs; the commit that gets there writes the row once,
// with every line of the tail, and the next ones leave it alone again. The figures every reader
// reports are exact all along, and the run's seqs dense.
func TestARunsTailIsFoldedIntoItsRowOnceItReachesItsBound(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t, outbox.WithDurability(outbox.DurabilityNormal))
	if seq := outboxtest.MustEnqueue(t, s, "run"); seq != 1 {
		t.Fatalf("first seq %d", seq)
	}
	raw := outboxtest.RawDBRW(t, path)
	logFigureWrites(t, raw)
	for seq := int64(2); seq <= 300; seq++ {
		if got := outboxtest.MustEnqueue(t, s, "run"); got != seq {
			t.Fatalf("enqueue gave seq %d, want %d", got, seq)
		}
		writes := takeFigureWrites(t, raw)["run"]
		switch {
		case seq == 257 && writes != 1:
			t.Errorf("the commit of seq 257, 256 seqs past the row's, wrote the row %d times, want once", writes)
		case seq != 257 && writes != 0:
			t.Errorf("the commit of seq %d wrote the row %d times, want none", seq, writes)
		}
		if seq == 256 || seq == 257 || seq%50 == 0 {
			checkReadersExact(t, s, path, fmt.Sprintf("the enqueue of seq %d", seq))
		}
		if want := map[int64]int{256: 255, 257: 0, 300: 43}[seq]; want != 0 || seq == 257 {
			if n := tailOf(t, path, "run"); n != want {
				t.Errorf("after seq %d the tail holds %d lines, want %d", seq, n, want)
			}
		}
	}
}

// TestSeveralProducersEnqueuingPastTheTailsBoundGetDenseSeqsAndExactFigures: goroutines enqueuing
// to one run at once, alone and in batches, lined up in group commits, get every seq from 1 once,
// however often the tail is folded between them, and the figures are what the rows show.
func TestSeveralProducersEnqueuingPastTheTailsBoundGetDenseSeqsAndExactFigures(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t, outbox.WithDurability(outbox.DurabilityNormal))
	const producers, calls = 6, 40
	var mu sync.Mutex
	var seqs []int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for c := range calls {
				var got []int64
				if c%5 == 4 {
					batch := make([]outbox.EventBuilder, 7)
					for i := range batch {
						batch[i] = outboxtest.LineOf("batch")
					}
					batchSeqs, err := s.EnqueueEvents(ctx, "run", batch)
					if err != nil {
						t.Error(err)
						return
					}
					got = batchSeqs
				} else {
					seq, err := s.EnqueueEvent(ctx, "run", outboxtest.LineOf(strconv.Itoa(p)))
					if err != nil {
						t.Error(err)
						return
					}
					got = append(got, seq)
				}
				mu.Lock()
				seqs = append(seqs, got...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	if want := outboxtest.SeqRange(1, int64(len(seqs))); !slices.Equal(seqs, want) {
		t.Fatalf("the producers got seqs %v, want each of 1 to %d once", seqs, len(seqs))
	}
	if n := tailOf(t, path, "run"); n >= 256 || len(seqs) < 2*256 {
		t.Errorf("tail of %d lines after %d enqueued; want under 256, after at least 512", n, len(seqs))
	}
	checkReadersExact(t, s, path, "the producers")
}

// TestRowsForgottenAfterAFoldKeepTheRunsSeqsAndFiguresExact: the relay's record folds the tail before
// it forgets the batch, and ForgetEvents folds it before it deletes the lines not yet projected: the
// run's last seq is kept whichever rows are gone, the next enqueue numbers on from it, and the
// counters of lines ever enqueued and projected never go down, across a restart too.
func TestRowsForgottenAfterAFoldKeepTheRunsSeqsAndFiguresExact(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t, outbox.WithDurability(outbox.DurabilityNormal))
	sink := outboxtest.NewMemSink()
	var enqueued int64
	totals := func(step string) {
		t.Helper()
		tot, err := s.Totals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot.EnqueuedTotal < enqueued {
			t.Errorf("after %s, lines ever enqueued went down from %d to %d", step, enqueued, tot.EnqueuedTotal)
		}
		enqueued = tot.EnqueuedTotal
		checkReadersExact(t, s, path, step)
	}
	for range 10 {
		outboxtest.MustEnqueue(t, s, "run")
	}
	if n := tailOf(t, path, "run"); n != 9 {
		t.Fatalf("tail of %d lines before the relay's record, want 9", n)
	}
	totals("ten enqueues")
	if err := outboxtest.NewRelay(t, s, sink, "run").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := tailOf(t, path, "run"); n != 0 || outboxtest.CountRows(t, path, "engine_run_id = 'run'") != 0 {
		t.Fatalf("after the record: tail %d, want every row folded and forgotten", n)
	}
	totals("the relay's record and forgetting")
	for range 3 {
		outboxtest.MustEnqueue(t, s, "run")
	}
	if n := tailOf(t, path, "run"); n != 3 {
		t.Fatalf("tail of %d lines after three enqueues, want 3", n)
	}
	totals("three enqueues after the forgetting")
	if n, err := s.ForgetEvents(ctx, "keeper"); n != 3 || err != nil {
		t.Fatalf("ForgetEvents: %d, %v; want the three lines", n, err)
	}
	totals("ForgetEvents")
	if seq := outboxtest.MustEnqueue(t, s, "run"); seq != 14 {
		t.Errorf("the next seq after the lines were forgotten: %d, want 14", seq)
	}
	totals("an enqueue after ForgetEvents")
	s = outboxtest.Reopen(t, s, outbox.WithDurability(outbox.DurabilityNormal))
	totals("a restart")
	if seq := outboxtest.MustEnqueue(t, s, "run"); seq != 15 {
		t.Errorf("the next seq after a restart: %d, want 15", seq)
	}
	totals("an enqueue after a restart")
	if got := outboxtest.SeqsOf(sink.All()); !slices.Equal(got, outboxtest.SeqRange(1, 10)) {
		t.Errorf("the sink got seqs %v, want 1 to 10", got)
	}
}

// tailEngine is a child process's engine: it enqueues one line a commit to run "run", up to 1,000,
// and is killed at a commit on the way.
func tailEngine() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	s, err := outbox.Open(ctx, os.Getenv("OUTBOX_TEST_DB"), outbox.WithDurability(outbox.DurabilityFull))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	for i := range 1000 {
		if _, err := s.EnqueueEvent(ctx, "run", journal.Builder("run", "x", i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestAnEngineKilledBetweenFoldsLeavesATailThatEveryReaderCountsAndTheNextNumbersOnFrom: engines are
// SIGKILLed after a commit and before one, while the run's last lines are a tail its row does not
// hold, and once after the tail was folded at its bound. After each kill the figures every reader
// reports are what the rows show, the next engine numbers on without a hole or a seq given twice,
// and recovery projects every committed line once.
func TestAnEngineKilledBetweenFoldsLeavesATailThatEveryReaderCountsAndTheNextNumbersOnFrom(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	env := []string{"OUTBOX_TEST_DB=" + dbPath}
	var last int64
	for i, kill := range []struct {
		point string
		at    int
		tail  bool // the kill leaves a tail
	}{
		{faultpoint.AfterCommit, 40, true},
		{faultpoint.BeforeCommit, 30, true},
		{faultpoint.AfterCommit, 200, true}, // past seq 256: folded once on the way
	} {
		child := crashtest.Child(t, "tail-engine", append(env, crashtest.KillAt(kill.point, kill.at)...)...)
		if err := child.Run(); !crashtest.Killed(err) {
			t.Fatalf("engine %d was not killed at %s #%d: %v", i, kill.point, kill.at, err)
		}
		s, err := outbox.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Run(ctx, "run")
		if err != nil {
			t.Fatal(err)
		}
		if st.LastSeq <= last || int64(outboxtest.CountRows(t, dbPath, "engine_run_id = 'run'")) != st.LastSeq {
			t.Errorf("after engine %d the run's last seq is %d (was %d) with %d rows", i, st.LastSeq, last,
				outboxtest.CountRows(t, dbPath, "engine_run_id = 'run'"))
		}
		last = st.LastSeq
		if n := tailOf(t, dbPath, "run"); (n > 0) != kill.tail || n >= 256 {
			t.Errorf("after engine %d the tail holds %d lines", i, n)
		}
		checkReadersExact(t, s, dbPath, fmt.Sprintf("the kill of engine %d", i))
		s.Close()
	}
	if last <= 256 {
		t.Fatalf("the engines enqueued %d lines, want more than the tail's bound", last)
	}
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, j, "final").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	checkReadersExact(t, s, dbPath, "recovery")
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Runs["run"]; got.Last != last || int64(got.Lines) != last || rep.Duplicates != 0 {
		t.Errorf("journal: run %+v, %d duplicates; want seqs 1 to %d once each", got, rep.Duplicates, last)
	}
}
