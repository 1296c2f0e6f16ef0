// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// logFigureWrites records, from now on, every write of a run's figures row: one row in
// test_figure_writes per statement that inserts or updates it (an upsert is one of the two).
func logFigureWrites(t *testing.T, raw *sql.DB) {
	t.Helper()
	for _, stmt := range []string{
		`CREATE TABLE test_figure_writes (engine_run_id TEXT NOT NULL)`,
		`CREATE TRIGGER test_figures_inserted AFTER INSERT ON outbox_runs
		 BEGIN INSERT INTO test_figure_writes VALUES (NEW.engine_run_id); END`,
		`CREATE TRIGGER test_figures_updated AFTER UPDATE ON outbox_runs
		 BEGIN INSERT INTO test_figure_writes VALUES (NEW.engine_run_id); END`,
	} {
		if _, err := raw.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// takeFigureWrites returns how many times each run's figures row was written since the last call.
func takeFigureWrites(t *testing.T, raw *sql.DB) map[string]int {
	t.Helper()
	rows, err := raw.Query(`SELECT engine_run_id, count(*) FROM test_figure_writes GROUP BY engine_run_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var run string
		var n int
		if err := rows.Scan(&run, &n); err != nil {
			t.Fatal(err)
		}
		out[run] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DELETE FROM test_figure_writes`); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkFiguresExact(t *testing.T, path, step string) {
	t.Helper()
	if diff := cmp.Diff(figuresFromRows(t, path), figuresKept(t, path)); diff != "" {
		t.Errorf("after %s, the figures differ from the rows (-rows +figures):\n%s", step, diff)
	}
}

// TestAGroupOfEnqueuesToManyRunsWritesEachRunsFiguresAtMostOnceAndExactly: 300 calls to 30 runs (some
// new, some with lines already, some calls failing or declining) lined up in one group commit leave
// each run's figures what its rows say, and write a new run's figures row once for the whole group,
// not once per line, and the row of a run that has one not at all (its lines are its tail,
// migrations/00010); a batch of a hundred lines writes no row either, and one that takes the tail
// past its bound writes its run's row once.
func TestAGroupOfEnqueuesToManyRunsWritesEachRunsFiguresAtMostOnceAndExactly(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t)
	for r := range 10 {
		outboxtest.MustEnqueue(t, s, fmt.Sprintf("run-%02d", r))
	}
	raw := outboxtest.RawDBRW(t, path)
	logFigureWrites(t, raw)

	// The committer runs this call's builder, holding the next group back until every call below
	// waits in its queue.
	release := make(chan struct{})
	blocked := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := s.EnqueueEvent(ctx, "blocker", func(seq int64) ([]byte, error) {
			close(blocked)
			<-release
			return []byte(`{"blocker":1}`), nil
		})
		first <- err
	}()
	<-blocked
	const runs, perRun = 30, 10
	var wg sync.WaitGroup
	errs := make([]error, runs*perRun)
	for i := range runs * perRun {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("run-%02d", i%runs)
			switch i % 7 {
			case 3:
				_, errs[i] = s.EnqueueEvent(ctx, run, func(int64) ([]byte, error) { return nil, outboxtest.ErrRender })
				if errors.Is(errs[i], outboxtest.ErrRender) {
					errs[i] = nil
				}
			case 5:
				_, errs[i] = s.EnqueueEvent(ctx, run, func(int64) ([]byte, error) { return nil, nil })
			case 6:
				_, _, errs[i] = s.EnqueueOnce(ctx, run, fmt.Sprintf("key-%d", i), outboxtest.LineOf("once"))
			default:
				_, errs[i] = s.EnqueueEvent(ctx, run, outboxtest.LineOf("x"))
			}
		}()
	}
	for outbox.QueuedCalls(s) < runs*perRun {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	checkFiguresExact(t, path, "a group of calls to many runs")
	want := map[string]int{"blocker": 1}
	for r := 10; r < runs; r++ {
		want[fmt.Sprintf("run-%02d", r)] = 1
	}
	if diff := cmp.Diff(want, takeFigureWrites(t, raw)); diff != "" {
		t.Errorf("writes of each run's figures for the blocker's group and the group after it (-want +got):\n%s", diff)
	}

	batch := make([]outbox.EventBuilder, 100)
	for i := range batch {
		batch[i] = outboxtest.LineOf("batch")
	}
	if _, err := s.EnqueueEvents(ctx, "run-00", batch); err != nil {
		t.Fatal(err)
	}
	checkFiguresExact(t, path, "a batch of a hundred lines")
	if diff := cmp.Diff(map[string]int{}, takeFigureWrites(t, raw)); diff != "" {
		t.Errorf("writes of the figures for a batch (-want +got):\n%s", diff)
	}
	batch = append(batch, batch...)
	if _, err := s.EnqueueEvents(ctx, "run-00", batch); err != nil {
		t.Fatal(err)
	}
	checkFiguresExact(t, path, "a batch of two hundred lines")
	if diff := cmp.Diff(map[string]int{"run-00": 1}, takeFigureWrites(t, raw)); diff != "" {
		t.Errorf("writes of the figures for a batch past the tail's bound (-want +got):\n%s", diff)
	}
}

// TestATransactionRolledBackLeavesNoFigureMoved: enqueues to a run with lines and to new runs, in
// WriteTx, in EnqueueEvents and in a transaction of the caller's own database handle, all rolled
// back, leave every figure as it was and make no row for a new run; the same enqueues committed in
// the caller's own transaction are counted.
func TestATransactionRolledBackLeavesNoFigureMoved(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t)
	for range 3 {
		outboxtest.MustEnqueue(t, s, "a")
	}
	before := figuresKept(t, path)
	rolledBack := errors.New("rolled back")
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		for _, run := range []string{"a", "new", "a"} {
			if _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("x")); err != nil {
				return err
			}
		}
		if _, _, err := s.EnqueueOnceTx(ctx, tx, "new-once", "k", outboxtest.LineOf("once")); err != nil {
			return err
		}
		return rolledBack
	}); !errors.Is(err, rolledBack) {
		t.Fatalf("WriteTx: %v", err)
	}
	if _, err := s.EnqueueEvents(ctx, "a", []outbox.EventBuilder{
		outboxtest.LineOf("x"), outboxtest.LineOf("y"),
		func(int64) ([]byte, error) { return nil, outboxtest.ErrRender },
	}); !errors.Is(err, outboxtest.ErrRender) {
		t.Fatalf("EnqueueEvents with a failing builder: %v", err)
	}
	own := outboxtest.RawDBRW(t, path)
	tx, err := own.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"a", "own-new"} {
		if _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, figuresKept(t, path)); diff != "" {
		t.Errorf("figures after the rolled-back transactions (-before +after):\n%s", diff)
	}
	checkFiguresExact(t, path, "the rolled-back transactions")

	tx, err = own.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"a", "own-new", "own-new"} {
		if _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	checkFiguresExact(t, path, "a caller's own transaction committed")
	if got := figuresKept(t, path)["own-new"]; got != "last 2, projected 0, 2 lines, 0 in the ledger" {
		t.Errorf("run own-new after its commit: %s", got)
	}
}

// TestRowsThatOtherWritersInsertDeleteOrMarkAreCountedToo: the figures stay exact when rows are
// written by something other than the store's enqueues: inserted, deleted and moved into the ledger
// by plain SQL, outside the store and inside its WriteTx, including a delete of a line the same
// transaction enqueued to a new run, before the store has counted it.
func TestRowsThatOtherWritersInsertDeleteOrMarkAreCountedToo(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "a")
	raw := outboxtest.RawDBRW(t, path)
	for _, stmt := range []string{
		`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('a', 2, '{"raw":2}'), ('other', 1, '{"raw":1}'), ('other', 2, '{"raw":2}')`,
		`INSERT INTO events_outbox (engine_run_id, seq, line, once_key) VALUES ('other', 3, '{"raw":3}', 'raw-key')`,
		`UPDATE events_outbox SET once_key = 'raw-key-2' WHERE engine_run_id = 'other' AND seq = 1`,
		`DELETE FROM events_outbox WHERE engine_run_id = 'other' AND seq = 2`,
	} {
		if _, err := raw.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		checkFiguresExact(t, path, stmt)
	}
	if seq := outboxtest.MustEnqueue(t, s, "a"); seq != 3 {
		t.Errorf("the store's next seq after another writer's line: %d, want 3", seq)
	}
	checkFiguresExact(t, path, "an enqueue after another writer's line")

	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		for _, run := range []string{"fresh", "fresh", "a"} {
			if _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("x")); err != nil {
				return err
			}
		}
		for _, stmt := range []string{
			`DELETE FROM events_outbox WHERE engine_run_id = 'fresh' AND seq = 1`,
			`UPDATE events_outbox SET once_key = 'in-tx' WHERE engine_run_id = 'fresh' AND seq = 2`,
			`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('plain', 1, '{"raw":1}')`,
			`DELETE FROM events_outbox WHERE engine_run_id = 'a' AND seq = 2`,
		} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkFiguresExact(t, path, "plain writes inside WriteTx")
	want := map[string]string{
		"fresh": "last 2, projected 0, 1 lines, 1 in the ledger",
		"plain": "last 1, projected 0, 1 lines, 0 in the ledger",
		"a":     "last 4, projected 0, 3 lines, 0 in the ledger",
	}
	got := figuresKept(t, path)
	for run, w := range want {
		if got[run] != w {
			t.Errorf("run %s: %s, want %s", run, got[run], w)
		}
	}
}

// TestLedgerSizeIsReadFromTheRunFiguresNotCountedOverTheKeys: LedgerSize sums the runs' figures, a
// row per run, so that its cost does not grow with the ledger; it agrees with the ledger's rows
// through marking, forgetting and a key moved in by plain SQL.
func TestLedgerSizeIsReadFromTheRunFiguresNotCountedOverTheKeys(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t)
	for i := range 4 {
		if _, _, err := s.EnqueueOnce(ctx, fmt.Sprintf("r%d", i%2), fmt.Sprintf("k%d", i), outboxtest.LineOf("once")); err != nil {
			t.Fatal(err)
		}
		outboxtest.MustEnqueue(t, s, "r0")
	}
	if err := outboxtest.NewRelay(t, s, outboxtest.NewMemSink(), "r0").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	raw := outboxtest.RawDBRW(t, path)
	if _, err := raw.Exec(`UPDATE events_outbox SET once_key = 'plain' WHERE engine_run_id = 'r1' AND seq = 1`); err != nil {
		t.Fatal(err)
	}
	var keys int64
	if err := raw.QueryRow(`SELECT count(*) FROM events_outbox WHERE once_key <> ''`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LedgerSize(ctx); n != keys || keys != 3 || err != nil {
		t.Fatalf("LedgerSize: %d, %v; the ledger holds %d keys, want 3", n, err, keys)
	}
	// The figures are what it reads: a figure set by hand shows, where a count of the keys would not.
	if _, err := raw.Exec(`UPDATE outbox_runs SET ledger_lines = ledger_lines + 1000 WHERE engine_run_id = 'r0'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LedgerSize(ctx); n != keys+1000 || err != nil {
		t.Errorf("LedgerSize after the figures were moved by hand: %d, %v; want %d", n, err, keys+1000)
	}
}

// TestEnqueuesRolledBackToASavepointInsideWriteTxAreNotCounted: a WriteTx function that enqueues,
// rolls back to a savepoint, and enqueues again leaves each run's figures what its rows say: the
// lines the savepoint took back are not counted, and their seqs are given again.
func TestEnqueuesRolledBackToASavepointInsideWriteTxAreNotCounted(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "a")
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.EnqueueTx(ctx, tx, "a", outboxtest.LineOf("kept")); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `SAVEPOINT inner`); err != nil {
			return err
		}
		for _, run := range []string{"a", "a", "new", "gone"} {
			if _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("undone")); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO inner`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `RELEASE inner`); err != nil {
			return err
		}
		_, err := s.EnqueueTx(ctx, tx, "new", outboxtest.LineOf("after"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	checkFiguresExact(t, path, "a rollback to a savepoint inside WriteTx")
	want := map[string]string{
		"a":   "last 2, projected 0, 2 lines, 0 in the ledger",
		"new": "last 1, projected 0, 1 lines, 0 in the ledger",
	}
	if diff := cmp.Diff(want, figuresKept(t, path)); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
	if seq := outboxtest.MustEnqueue(t, s, "a"); seq != 3 {
		t.Errorf("the next seq of run a: %d, want 3", seq)
	}
	checkFiguresExact(t, path, "an enqueue after the savepoint's")
}
