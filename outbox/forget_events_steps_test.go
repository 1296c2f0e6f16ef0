// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// bulkRun writes, with one SQL statement, n rows of run, projected up to projected, every
// thousandth of the projected ones announcing a once key (a ledger row).
func bulkRun(t *testing.T, path, run string, n, projected int) {
	t.Helper()
	d := outboxtest.RawDBRW(t, path)
	defer d.Close()
	if _, err := d.Exec(`
		WITH RECURSIVE s(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < ?2)
		INSERT INTO events_outbox (engine_run_id, seq, line, once_key)
		SELECT ?1, seq, printf('{"engine_run_id":"%s","seq":%d,"type":"x"}', ?1, seq),
		       CASE WHEN seq % 1000 = 0 AND seq <= ?3 THEN printf('%s-%d', ?1, seq) ELSE '' END
		FROM s`, run, n, projected); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO outbox_progress (engine_run_id, projected) VALUES (?, ?)`, run, projected); err != nil {
		t.Fatal(err)
	}
}

// TestForgetEventsDeletesInBoundedStepsAndACancelMidwayLeavesABookTheNextCallFinishes: two earlier
// runs hold several steps' worth of rows, projected and not; ForgetEvents cancelled after its first
// step has deleted at most a step, counted exactly, and left every run's rows after its projected
// position without a hole; the next call deletes the rest, the two counts adding up to every row but
// the ledger's, the figures exact throughout, and the current run's lines untouched and projected.
func TestForgetEventsDeletesInBoundedStepsAndACancelMidwayLeavesABookTheNextCallFinishes(t *testing.T) {
	// Not parallel: the fault point's hook is the process's.
	ctx := outboxtest.Patient(t)
	step := outbox.ForgetStep
	s, path := outboxtest.Setup(t)
	for range 3 {
		outboxtest.MustEnqueue(t, s, "current")
	}
	s.Close()
	bulkRun(t, path, "old", 2*step+step/2, step+step/4)
	bulkRun(t, path, "older", 2*step+1, 0)
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ledger := outboxtest.CountRows(t, path, "engine_run_id <> 'current' AND once_key <> ''")
	deletable := outboxtest.CountRows(t, path, "engine_run_id <> 'current'") - ledger
	checkFigures := func(when string) {
		t.Helper()
		if diff := cmp.Diff(figuresFromRows(t, path), figuresKept(t, path)); diff != "" {
			t.Errorf("%s, the figures differ from the rows (-rows +figures):\n%s", when, diff)
		}
	}
	checkFigures("before forgetting")

	var steps int
	cancelled, cancel := context.WithCancel(ctx)
	defer cancel()
	faultpoint.Set(func(p string) {
		if p == faultpoint.ForgetStep {
			steps++
			cancel()
		}
	})
	t.Cleanup(func() { faultpoint.Set(nil) })
	first, err := s.ForgetEvents(cancelled, "current")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ForgetEvents cancelled after its first step: (%d, %v), want context.Canceled", first, err)
	}
	left := outboxtest.CountRows(t, path, "engine_run_id <> 'current'") - ledger
	if steps != 1 || first <= 0 || first > int64(step) || first != int64(deletable-left) {
		t.Errorf("cancelled after %d steps, ForgetEvents counted %d rows and deleted %d; want one step of at most %d, counted exactly",
			steps, first, deletable-left, step)
	}
	checkFigures("after the cancelled call")
	for _, run := range []string{"old", "older"} {
		projected, err := s.Projected(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		after := outboxtest.CountRows(t, path, "engine_run_id = ? AND seq > ?", run, projected)
		top := outboxtest.CountRows(t, path, "engine_run_id = ? AND seq > ? AND seq <= ?", run, projected, int64(after)+projected)
		if top != after {
			t.Errorf("run %q keeps %d rows after its projected position %d, not all of them the next in line", run, after, projected)
		}
	}

	steps = 0
	second, err := s.ForgetEvents(ctx, "current")
	if err != nil {
		t.Fatalf("the next ForgetEvents: %v", err)
	}
	if first+second != int64(deletable) || steps < 2 {
		t.Errorf("the calls deleted %d + %d rows, the second in %d steps; want %d rows in all, in several steps",
			first, second, steps, deletable)
	}
	if n := outboxtest.CountRows(t, path, "engine_run_id <> 'current'"); n != ledger {
		t.Errorf("%d rows of earlier runs left, want only the %d of the ledger", n, ledger)
	}
	checkFigures("after the next call")

	sink := outboxtest.NewMemSink()
	if err := outboxtest.NewRelay(t, s, sink, "current").Flush(ctx); err != nil {
		t.Fatalf("Flush of the current run: %v", err)
	}
	if got := outboxtest.SeqsOf(sink.All()); !slices.Equal(got, outboxtest.SeqRange(1, 3)) {
		t.Errorf("the current run's relay sent %v, want 1 to 3", got)
	}
	if seq := outboxtest.MustEnqueue(t, s, "old"); seq != int64(2*step+step/2+1) {
		t.Errorf("next seq of the forgotten run: %d, want %d", seq, 2*step+step/2+1)
	}
}
