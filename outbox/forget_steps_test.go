// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// bulkProjected writes, with one SQL statement, n rows of run that are all projected (as a relay
// that kept what it projected leaves them): a book that a week of an engine run would fill, made in
// seconds.
func bulkProjected(t *testing.T, path, run string, n int) {
	t.Helper()
	d := outboxtest.RawDBRW(t, path)
	defer d.Close()
	if _, err := d.Exec(`
		WITH RECURSIVE s(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < ?2)
		INSERT INTO events_outbox (engine_run_id, seq, line)
		SELECT ?1, seq, printf('{"engine_run_id":"%s","seq":%d,"type":"x","data":"%s"}', ?1, seq, hex(zeroblob(60)))
		FROM s`, run, n); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO outbox_progress (engine_run_id, projected) VALUES (?, ?)`, run, n); err != nil {
		t.Fatal(err)
	}
}

// TestAStartOverFourHundredThousandProjectedRowsForgetsThemInBoundedStepsWithASmallWAL: an earlier
// run left 400,000 projected rows behind; the next start's Recover, under a short operation timeout,
// drops them all in steps, and the WAL never grows past the size limit, as one transaction over all of
// them would make it.
func TestAStartOverFourHundredThousandProjectedRowsForgetsThemInBoundedStepsWithASmallWAL(t *testing.T) {
	if outboxtest.RaceEnabled {
		t.Skip("writes and forgets 400,000 rows; make test runs it without the race detector")
	}
	t.Parallel()
	const rows = 400_000
	const walLimit = 8 << 20
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(outboxtest.Patient(t), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	bulkProjected(t, path, "old", rows)

	// Watch the WAL for the whole start, from the open on.
	var peak atomic.Int64
	stop := make(chan struct{})
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		for {
			if st, err := os.Stat(path + "-wal"); err == nil && st.Size() > peak.Load() {
				peak.Store(st.Size())
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	s, err = outbox.Open(outboxtest.Patient(t), path, outbox.WithOpTimeout(2*time.Second), outbox.WithWALSizeLimit(walLimit))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recoverErr := outboxtest.NewRelay(t, s, outboxtest.NewMemSink(), "new").Recover(context.Background())
	close(stop)
	watching.Wait()
	if recoverErr != nil {
		t.Fatalf("Recover: %v", recoverErr)
	}
	if n := outboxtest.CountRows(t, path, "engine_run_id = 'old'"); n != 0 {
		t.Errorf("%d rows of the earlier run left", n)
	}
	if p := peak.Load(); p > walLimit {
		t.Errorf("the WAL reached %d bytes, past its limit of %d", p, walLimit)
	}
	// The run's numbers go on from its highest seq.
	if seq, err := s.EnqueueEvent(outboxtest.Patient(t), "old", outboxtest.LineOf("x")); err != nil || seq != rows+1 {
		t.Errorf("next seq of the forgotten run: %d, %v; want %d", seq, err, rows+1)
	}
	t.Logf("WAL peak %d bytes", peak.Load())
}

// forgetEngine is one start of an engine in a child process: it recovers the earlier runs of the
// book into the journal, killed (crashtest.KillAt) in the middle of forgetting them.
func forgetEngine() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	s, err := outbox.Open(ctx, os.Getenv("OUTBOX_TEST_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	j, err := journal.OpenFile(os.Getenv("OUTBOX_TEST_JOURNAL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	r, err := outbox.NewRelay(s, j, os.Getenv("OUTBOX_TEST_RUN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestAStartKilledInTheMiddleOfForgettingLeavesTheRestForTheNextWithNothingLostOrAnnouncedTwice: an
// earlier run kept 30,000 projected lines, a tenth of them announcing a once key, and left 500 more
// pending. A start is SIGKILLed after its third step of forgetting; the next start finishes the job:
// the journal holds every line once, every key stays in the ledger, and only the ledger's rows remain.
func TestAStartKilledInTheMiddleOfForgettingLeavesTheRestForTheNextWithNothingLostOrAnnouncedTwice(t *testing.T) {
	t.Parallel()
	const projected, pending = 30_000, 500
	ctx := outboxtest.Patient(t)
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(from, to int) {
		t.Helper()
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			for i := from; i <= to; i++ {
				var err error
				if i%10 == 0 {
					_, _, err = s.EnqueueOnceTx(ctx, tx, "old", fmt.Sprintf("unit:%d", i), journal.Builder("old", "done", i))
				} else {
					_, err = s.EnqueueTx(ctx, tx, "old", journal.Builder("old", "x", i))
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= projected; i += 1000 {
		enqueue(i, i+999)
	}
	if err := outboxtest.NewRelay(t, s, j, "old", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(projected+1, projected+pending)
	j.Close()
	s.Close()

	env := []string{"OUTBOX_TEST_DB=" + dbPath, "OUTBOX_TEST_JOURNAL=" + jPath, "OUTBOX_TEST_RUN=first"}
	child := crashtest.Child(t, "forget-engine", append(env, crashtest.KillAt(faultpoint.ForgetStep, 3)...)...)
	if err := child.Run(); !crashtest.Killed(err) {
		t.Fatalf("the first start was not killed while forgetting: %v", err)
	}
	left := outboxtest.CountRows(t, dbPath, "engine_run_id = 'old' AND once_key = ''")
	if left == 0 || left >= projected+pending-(projected+pending)/10 {
		t.Fatalf("%d buffered rows after the kill; want some forgotten and some not", left)
	}
	child = crashtest.Child(t, "forget-engine", append(env[:2:2], "OUTBOX_TEST_RUN=second")...)
	if err := child.Run(); err != nil {
		t.Fatalf("the second start: %v", err)
	}

	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Runs["old"]; got.Lines != projected+pending || got.Duplicates != 0 || got.Last != projected+pending {
		t.Errorf("journal: run old %+v; want %d lines, once each", got, projected+pending)
	}
	if n := outboxtest.CountRows(t, dbPath, "engine_run_id = 'old' AND once_key = ''"); n != 0 {
		t.Errorf("%d buffered rows left", n)
	}
	if n := outboxtest.CountRows(t, dbPath, "engine_run_id = 'old' AND once_key <> ''"); n != (projected+pending)/10 {
		t.Errorf("%d ledger rows, want %d", n, (projected+pending)/10)
	}
	s, err = outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, i := range []int{10, projected, projected + pending} {
		if ok, _, err := s.EnqueueOnce(ctx, "later", fmt.Sprintf("unit:%d", i), journal.Builder("later", "done", i)); ok || err != nil {
			t.Errorf("key unit:%d announced again: %v, %v", i, ok, err)
		}
	}
	var st outbox.RunStats
	for r, err := range s.AllRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if r.RunID == "old" {
			st = r
		}
	}
	if want := int64((projected + pending) / 10); st.Lines != want || st.LedgerLines != want || st.LastSeq != projected+pending ||
		st.Projected != projected+pending || st.EnqueuedTotal != projected+pending || st.ProjectedTotal != projected+pending {
		t.Errorf("run old listed as %+v; want its %d ledger rows stored, everything projected", st, want)
	}
}
