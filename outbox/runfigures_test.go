// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// figuresFromRows is what the per-run figures must say, computed the slow way: from the stored rows
// and the positions.
func figuresFromRows(t *testing.T, path string) map[string]string {
	t.Helper()
	rows, err := outboxtest.RawDB(t, path).Query(`
		SELECT p.engine_run_id,
		       max(COALESCE((SELECT MAX(seq) FROM events_outbox AS e WHERE e.engine_run_id = p.engine_run_id), 0), COALESCE(g.last_seq, 0), COALESCE(g.projected, 0)),
		       COALESCE(g.projected, 0),
		       (SELECT count(*) FROM events_outbox AS e WHERE e.engine_run_id = p.engine_run_id),
		       (SELECT count(*) FROM events_outbox AS e WHERE e.engine_run_id = p.engine_run_id AND once_key <> '')
		FROM (SELECT engine_run_id FROM events_outbox UNION SELECT engine_run_id FROM outbox_progress) AS p
		LEFT JOIN outbox_progress AS g ON g.engine_run_id = p.engine_run_id`)
	if err != nil {
		t.Fatal(err)
	}
	return scanFigures(t, rows)
}

func figuresKept(t *testing.T, path string) map[string]string {
	t.Helper()
	// As the store's readers report them: each run's row with its tail added (migrations/00010).
	rows, err := outboxtest.RawDB(t, path).Query(`SELECT engine_run_id, last_seq, projected, lines, ledger_lines FROM outbox_run_figures`)
	if err != nil {
		t.Fatal(err)
	}
	return scanFigures(t, rows)
}

func scanFigures(t *testing.T, rows *sql.Rows) map[string]string {
	t.Helper()
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var run string
		var last, projected, lines, ledger int64
		if err := rows.Scan(&run, &last, &projected, &lines, &ledger); err != nil {
			t.Fatal(err)
		}
		out[run] = fmt.Sprintf("last %d, projected %d, %d lines, %d in the ledger", last, projected, lines, ledger)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTheRunFiguresFollowEveryChangeOfTheRowsInTheSameTransaction: the per-run figures that listing
// reads agree with what the rows and positions show after every kind of write: enqueues alone, in a
// group, in a caller's transaction rolled back, an insert a trigger fails, the relay's records with
// and without forgetting, a refusal, a retirement, MarkAnnounced, ForgetEvents and recovery.
func TestTheRunFiguresFollowEveryChangeOfTheRowsInTheSameTransaction(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t)
	check := func(step string) {
		t.Helper()
		if diff := cmp.Diff(figuresFromRows(t, path), figuresKept(t, path)); diff != "" {
			t.Errorf("after %s, the figures differ from the rows (-rows +figures):\n%s", step, diff)
		}
	}
	for i := range 5 {
		outboxtest.MustEnqueue(t, s, "a")
		if _, _, err := s.EnqueueOnce(ctx, "b", fmt.Sprintf("k%d", i), outboxtest.LineOf("once")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.EnqueueEvents(ctx, "a", []outbox.EventBuilder{outboxtest.LineOf("x"), outboxtest.LineOf("y")}); err != nil {
		t.Fatal(err)
	}
	check("enqueues")
	rolledBack := errors.New("rolled back")
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.EnqueueTx(ctx, tx, "a", outboxtest.LineOf("x")); err != nil {
			return err
		}
		return rolledBack
	}); !errors.Is(err, rolledBack) {
		t.Fatal(err)
	}
	check("an enqueue rolled back")
	raw := outboxtest.RawDBRW(t, path)
	if _, err := raw.Exec(`CREATE TRIGGER refuse AFTER INSERT ON events_outbox WHEN NEW.engine_run_id = 'a' AND NEW.seq = 8
		BEGIN SELECT RAISE(FAIL, 'refused after'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "a", outboxtest.LineOf("x")); err == nil {
		t.Fatal("the trigger's refusal was not reported")
	}
	check("an insert a trigger failed")
	if _, err := raw.Exec(`DROP TRIGGER refuse`); err != nil {
		t.Fatal(err)
	}
	if seq := outboxtest.MustEnqueue(t, s, "a"); seq != 8 {
		t.Errorf("the seq after a failed insert: %d, want 8", seq)
	}

	sink := outboxtest.NewMemSink()
	if err := outboxtest.NewRelay(t, s, sink, "a", outbox.WithBatchSize(3)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("a relay that forgets")
	if err := outboxtest.NewRelay(t, s, sink, "b", outbox.WithBatchSize(2), outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("a relay that keeps")

	outboxtest.MustEnqueue(t, s, "c")
	outboxtest.MustEnqueue(t, s, "c")
	refusing := sinkFunc(func(ctx context.Context, runID string, lines []outbox.EventLine) error {
		return fmt.Errorf("%w: no", outbox.ErrSinkRefused)
	})
	if err := outboxtest.NewRelay(t, s, refusing, "c").Flush(ctx); !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush into a refusing sink: %v", err)
	}
	if err := s.RetireEvent(ctx, "c", 1, "refused"); err != nil {
		t.Fatal(err)
	}
	check("a stop and a retirement")
	if err := outboxtest.NewRelay(t, s, sink, "c", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("the retired line projected")
	if err := s.MarkAnnounced(ctx, "c", map[int64]string{2: "marked"}); err != nil {
		t.Fatal(err)
	}
	check("MarkAnnounced")
	outboxtest.MustEnqueue(t, s, "d")
	if _, err := s.ForgetEvents(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	check("ForgetEvents")
	s = outboxtest.Reopen(t, s)
	if err := outboxtest.NewRelay(t, s, sink, "next").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	check("recovery")
}

// TestTheEnqueuedAndProjectedCountersNeverGoDownAcrossForgettingAndRestarts: the book's totals count
// every line ever enqueued and projected, whatever was forgotten since and however often the store
// was reopened.
func TestTheEnqueuedAndProjectedCountersNeverGoDownAcrossForgettingAndRestarts(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, _ := outboxtest.Setup(t)
	sink := outboxtest.NewMemSink()
	var enqueued, projected int64
	for start := range 3 {
		run := fmt.Sprintf("run-%d", start)
		if err := outboxtest.NewRelay(t, s, sink, run).Recover(ctx); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			outboxtest.MustEnqueue(t, s, run)
		}
		if _, _, err := s.EnqueueOnce(ctx, run, run, journal.Builder(run, "once", nil)); err != nil {
			t.Fatal(err)
		}
		if err := outboxtest.NewRelay(t, s, sink, run).Flush(ctx); err != nil {
			t.Fatal(err)
		}
		outboxtest.MustEnqueue(t, s, run) // left pending for the next start
		enqueued, projected = enqueued+12, projected+11
		if start > 0 {
			projected++ // the line the start before left pending, which Recover projected
		}
		tot, err := s.Totals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot.EnqueuedTotal != enqueued || tot.ProjectedTotal != projected || tot.Runs != int64(start+1) {
			t.Errorf("start %d: totals %+v; want %d enqueued, %d projected", start, tot, enqueued, projected)
		}
		st := runStats(t, s, run)
		if st.EnqueuedTotal != 12 || st.ProjectedTotal != 11 || st.Lines != 2 || st.LedgerLines != 1 {
			t.Errorf("start %d: run %+v; want 12 enqueued, 11 projected, the ledger row and the pending one stored", start, st)
		}
		s = outboxtest.Reopen(t, s)
	}
}
