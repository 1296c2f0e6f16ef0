// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestForeignTransactionsRacingTheStoresOwnWritesKeepTheNumbersDense: the caller's own *sql.DB on the
// store's file enqueues through EnqueueTx in deferred and immediate transactions, with short
// deadlines, while the store's own callers enqueue through the group committer. Every call told it
// succeeded is stored under its seq with its line, no call told it failed is, and the numbers stay
// dense.
func TestForeignTransactionsRacingTheStoresOwnWritesKeepTheNumbersDense(t *testing.T) {
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	open := func(lock string) *sql.DB {
		d, err := sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock="+lock)
		if err != nil {
			t.Fatal(err)
		}
		d.SetMaxOpenConns(1)
		t.Cleanup(func() { d.Close() })
		if err := outbox.Migrate(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dbs := []*sql.DB{open("deferred"), open("immediate")}
	got := newOutcomes()
	record := got.record
	var wg sync.WaitGroup
	build := func(id string) outbox.EventBuilder {
		return func(seq int64) ([]byte, error) {
			line := fmt.Sprintf("%s %d", id, seq)
			if seq%3 == 0 {
				line += " " + strings.Repeat("L", 600) // stored in events_lines
			}
			return []byte(line), nil
		}
	}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				id := fmt.Sprintf("own%d-%d", w, i)
				seq, err := s.EnqueueEvent(ctx, "r", build(id))
				record(id, seq, err)
			}
		}()
	}
	for k, d := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				id := fmt.Sprintf("foreign%d-%d", k, i)
				cctx, cancel := context.WithTimeout(ctx, time.Duration(i%4)*time.Millisecond)
				tx, err := d.BeginTx(ctx, nil)
				if err != nil {
					cancel()
					record(id, 0, err)
					continue
				}
				seq, err := s.EnqueueTx(cctx, tx, "r", build(id))
				cancel()
				if err != nil {
					tx.Rollback()
				} else if err = tx.Commit(); err != nil {
					seq = 0
				}
				record(id, seq, err)
			}
		}()
	}
	wg.Wait()
	stored := map[string]int64{}
	lines := outboxtest.AllLines(t, s, "r")
	for i, l := range lines {
		if l.Seq != int64(i+1) {
			t.Fatalf("seqs %v are not dense", outboxtest.SeqsOf(lines))
		}
		f := strings.Fields(string(l.Line))
		if len(f) < 2 || f[1] != fmt.Sprint(l.Seq) {
			t.Fatalf("line %d is %.40q", l.Seq, l.Line)
		}
		stored[f[0]] = l.Seq
	}
	t.Logf("%d of %d calls stored", got.check(t, stored), got.len())
	var spilled, want int
	raw := outboxtest.RawDB(t, path)
	if err := raw.QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow(`SELECT count(*) FROM events_outbox WHERE spill <> 0`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if spilled != want {
		t.Errorf("events_lines holds %d lines, events_outbox refers to %d", spilled, want)
	}
}

// TestEnqueueTxAfterTheCallersOwnRowAtTheNextSeq: a caller that inserts a row at the run's next seq by
// raw SQL in WriteTx, then calls EnqueueTx, must get either an error or a seq of its own; never a
// seq that names the caller's row.
func TestEnqueueTxAfterTheCallersOwnRowAtTheNextSeq(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	outboxtest.MustEnqueue(t, s, "r")
	var seq int64
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('r', 2, '{"raw":2}')`); err != nil {
			return err
		}
		var err error
		seq, err = s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("tx"))
		return err
	})
	lines := outboxtest.AllLines(t, s, "r")
	if err != nil {
		if len(lines) != 1 {
			t.Fatalf("WriteTx failed (%v) but run r holds %d lines", err, len(lines))
		}
		return
	}
	if seq != 3 || len(lines) != 3 || string(lines[1].Line) != `{"raw":2}` {
		t.Fatalf("EnqueueTx after the caller's row 2: seq %d, lines %v", seq, lines)
	}
}

func TestNoRunReusesASeqAfterItsRowsAreForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		outboxtest.MustEnqueue(t, s, "old")
	}
	if n, err := s.ForgetEvents(ctx, "current"); err != nil || n != 3 {
		t.Fatalf("ForgetEvents: (%d, %v), want 3 rows", n, err)
	}
	if seq := outboxtest.MustEnqueue(t, s, "old"); seq != 4 {
		t.Errorf("next seq of a forgotten run: %d, want 4", seq)
	}
	// The same across a reopen, and through every enqueue method.
	s = outboxtest.Reopen(t, s)
	if _, err := s.ForgetEvents(ctx, "current"); err != nil {
		t.Fatal(err)
	}
	if _, seq, err := s.EnqueueOnce(ctx, "old", "k", outboxtest.LineOf("x")); err != nil || seq != 5 {
		t.Errorf("EnqueueOnce on a forgotten run: (%d, %v), want 5", seq, err)
	}
	if seqs, err := s.EnqueueEvents(ctx, "old", []outbox.EventBuilder{outboxtest.LineOf("x")}); err != nil || seqs[0] != 6 {
		t.Errorf("EnqueueEvents on a forgotten run: (%v, %v), want [6]", seqs, err)
	}
	runs, _ := collect(s.AllRuns(ctx))
	if len(runs) != 1 || runs[0].LastSeq != 6 || runs[0].Lines != 2 {
		t.Errorf("Runs: %+v, want old with LastSeq 6 and 2 lines stored", runs)
	}
}

func TestARunOutOfSeqsFailsAloneInItsGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	s.Close()
	d := outboxtest.RawDBRW(t, path)
	if _, err := d.Exec(`INSERT INTO outbox_progress (engine_run_id, projected, last_seq) VALUES ('full', 0, ?)`, int64(math.MaxInt64)); err != nil {
		t.Fatal(err)
	}
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := "ok"
			if i%4 == 0 {
				run = "full"
			}
			_, errs[i] = s.EnqueueEvent(ctx, run, outboxtest.LineOf("x"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%4 == 0 {
			if !errors.Is(err, outbox.ErrSeqExhausted) || !strings.Contains(err.Error(), `"full"`) {
				t.Errorf("call on the exhausted run: %v, want ErrSeqExhausted naming it", err)
			}
		} else if err != nil {
			t.Errorf("call on another run: %v", err)
		}
	}
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "ok")); len(got) != 30 || got[29] != 30 {
		t.Errorf("run ok: %v, want 1..30", got)
	}
}

// TestARunIDStaysUsedAfterItsRowsAreForgotten: EventsUsed, the freshness check of a run id, still
// says a run was used after Recover or ForgetEvents dropped its rows.
func TestARunIDStaysUsedAfterItsRowsAreForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "projected")
	outboxtest.MustEnqueue(t, s, "forgotten")
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "projected").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s = outboxtest.Reopen(t, s)
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "new").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForgetEvents(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"projected", "forgotten"} {
		if used, err := s.EventsUsed(ctx, run); err != nil || !used {
			t.Errorf("EventsUsed(%s) after its rows were dropped: (%v, %v), want true", run, used, err)
		}
	}
	if used, _ := s.EventsUsed(ctx, "never"); used {
		t.Error("EventsUsed of a run never used: true")
	}
}
