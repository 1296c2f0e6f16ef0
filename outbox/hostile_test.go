// SPDX-License-Identifier: Apache-2.0

package outbox_test

// Hostile and mistaken callers: each test here is a way an ordinary caller, careless or malicious,
// tried to make the store lose, merge or duplicate an event, and what the store does instead.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/internal/dirstate"
	"github.com/textmachine/outbox/internal/faultvfs"
	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// checkUsable makes one call of every kind on s and fails the test if any of them fails: a store that a
// caller's misfortune took down would fail them all.
func checkUsable(t *testing.T, s *outbox.Store, runID string) {
	t.Helper()
	ctx := outboxtest.Patient(t) // a check, not the calls under test: no short operation timeout
	seq, err := s.EnqueueEvent(ctx, runID, outboxtest.LineOf("after"))
	if err != nil {
		t.Fatalf("EnqueueEvent after: %v", err)
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := s.EnqueueTx(ctx, tx, runID, outboxtest.LineOf("tx")); return err }); err != nil {
		t.Fatalf("WriteTx after: %v", err)
	}
	key := fmt.Sprintf("usable:%s:%d", runID, seq)
	if _, err := s.EnqueueEvents(ctx, runID, []outbox.EventBuilder{outboxtest.LineOf("a"), outboxtest.LineOf("b")}); err != nil {
		t.Fatalf("EnqueueEvents after: %v", err)
	}
	if err := s.MarkAnnounced(ctx, runID, map[int64]string{seq: key}); err != nil {
		t.Fatalf("MarkAnnounced after: %v", err)
	}
	if _, err := s.PendingEvents(ctx, runID, 0, 10); err != nil {
		t.Fatalf("PendingEvents after: %v", err)
	}
	// Every row is stored, a projected ledger row with its digest in place of its line.
	runs, err := collect(s.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range runs {
		if st.RunID == runID && (st.Lines == 0 || st.Lines != st.LastSeq) {
			t.Fatalf("seqs of %s not dense: %d rows, last %d", runID, st.Lines, st.LastSeq)
		}
	}
}

func TestACancelledWriteTxCostsThatCallAlone(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		fn   func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error
	}{
		{"cancelled inside fn, fn returns nil", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
				if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("lost")); err != nil {
					return err
				}
				cancel()
				return nil
			}},
		{"cancelled inside fn, fn returns its error", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
				cancel()
				_, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("lost"))
				return err
			}},
		{"deadline passes while fn sleeps", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
			if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("lost")); err != nil {
				return err
			}
			<-ctx.Done()
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			return err
		}},
		{"cancelled inside a builder", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
				_, err := s.EnqueueTx(ctx, tx, "r", func(seq int64) ([]byte, error) {
					cancel()
					return fmt.Appendf(nil, `{"seq":%d}`, seq), nil
				})
				return err
			}},
	} {
		ctx, cancel := tc.ctx()
		err := s.WriteTx(ctx, func(tx *sql.Tx) error { return tc.fn(ctx, cancel, tx) })
		cancel()
		if err == nil {
			t.Errorf("%s: WriteTx returned nil", tc.name)
		}
	}
	// Nothing of the cancelled calls is stored, and every later call works, densely numbered.
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); len(got) != 1 {
		t.Errorf("stored after cancelled calls: %v, want [1]", got)
	}
	checkUsable(t, s, "r")
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); got[1] != 2 {
		t.Errorf("the next seq after cancelled calls is %d, want 2", got[1])
	}
}

func TestAWriteTxPastTheOperationTimeoutCostsThatCallAlone(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t, outbox.WithOpTimeout(time.Second))
	err := s.WriteTx(context.Background(), func(tx *sql.Tx) error {
		if _, err := s.EnqueueTx(context.Background(), tx, "r", outboxtest.LineOf("lost")); err != nil {
			return err
		}
		time.Sleep(1500 * time.Millisecond)
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WriteTx past the operation timeout: %v, want DeadlineExceeded", err)
	}
	checkUsable(t, s, "r")
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))[0]; got != 1 {
		t.Errorf("first stored seq %d, want 1", got)
	}
}

func TestAnEnqueueTxAfterAnInterruptedStatementStoresNothing(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (id INTEGER PRIMARY KEY, cents INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		// A long write interrupted mid-way: SQLite rolls the whole transaction back.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, ierr := tx.ExecContext(short, `INSERT INTO spend (cents)
			WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) SELECT i FROM n`)
		if ierr == nil {
			t.Skip("the statement finished before its deadline")
		}
		// A careless caller ignores that error and goes on: its own statement would commit on its
		// own, and the store refuses that commit.
		tx.ExecContext(ctx, `INSERT INTO spend (cents) VALUES (7)`)
		_, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("x"))
		if err == nil {
			t.Error("EnqueueTx in a transaction SQLite rolled back returned nil")
		}
		return nil
	})
	if err == nil {
		t.Error("WriteTx of a transaction SQLite rolled back returned nil")
	}
	checkNothingStored(t, s, "r")
	checkUsable(t, s, "r")
}

// checkNothingStored fails the test when a WriteTx that returned an error left a line of run or a row
// of the caller's spend table.
func checkNothingStored(t *testing.T, s *outbox.Store, run string) {
	t.Helper()
	if n := len(outboxtest.AllLines(t, s, run)); n != 0 {
		t.Errorf("%d lines stored by a WriteTx that returned an error", n)
	}
	if n := spendRows(t, s); n != 0 {
		t.Errorf("%d of the caller's rows stored by a WriteTx that returned an error", n)
	}
}

func spendRows(t *testing.T, s *outbox.Store) int {
	t.Helper()
	var n int
	if err := s.WriteTx(context.Background(), func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FROM spend`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAWriteTxFunctionThatCommitsItselfStoresNothing: the transaction is the store's to commit; a
// function that commits it itself gets an error from WriteTx, and nothing of it is stored, so a
// retry cannot enqueue the event twice.
func TestAWriteTxFunctionThatCommitsItselfStoresNothing(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (id INTEGER PRIMARY KEY, cents INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO spend (cents) VALUES (1)`); err != nil {
			return err
		}
		if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("x")); err != nil {
			return err
		}
		tx.Commit()
		return nil
	})
	if err == nil {
		t.Error("WriteTx whose function committed the transaction itself returned nil")
	}
	checkNothingStored(t, s, "r")
	checkUsable(t, s, "r")
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))[0]; got != 1 {
		t.Errorf("first seq %d, want 1", got)
	}
}

// TestRandomCancellationsNeverLoseOrDuplicateAnEvent runs thousands of calls of every write method on
// several goroutines, each with a context cancelled at a random moment (before the call, inside a
// builder, inside a WriteTx function, at a random deadline), beside relays flushing under random short
// deadlines. Afterwards the acknowledged calls are exactly the stored lines, every run's seqs are
// dense, the journal holds every line once, and the store never needed a reopen.
func TestRandomCancellationsNeverLoseOrDuplicateAnEvent(t *testing.T) {
	t.Parallel()
	calls := 3000
	if testing.Short() {
		calls = 600
	}
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (call INTEGER PRIMARY KEY)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(filepath.Join(t.TempDir(), "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	runs := []string{"a", "b", "c"}

	type ack struct {
		run  string
		seq  int64
		call int
		part int
	}
	var (
		mu      sync.Mutex
		acked   = map[string]ack{} // by "call/part"
		spends  = map[int]bool{}
		next    atomic.Int64
		workers sync.WaitGroup
	)
	build := func(run string, call, part int, cancel context.CancelFunc) outbox.EventBuilder {
		return func(seq int64) ([]byte, error) {
			if cancel != nil {
				cancel()
			}
			return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"call":%d,"part":%d}`, run, seq, call, part), nil
		}
	}
	record := func(run string, call, part int, seq int64) {
		mu.Lock()
		acked[fmt.Sprintf("%d/%d", call, part)] = ack{run, seq, call, part}
		mu.Unlock()
	}
	for w := 0; w < 8; w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				call := int(next.Add(1))
				if call > calls {
					return
				}
				run := runs[rng.IntN(len(runs))]
				cctx, cancel := context.WithCancel(ctx)
				var inBuilder context.CancelFunc
				switch rng.IntN(5) {
				case 0:
					cancel()
				case 1:
					inBuilder = cancel
				case 2:
					var c2 context.CancelFunc
					cctx, c2 = context.WithTimeout(cctx, time.Duration(rng.IntN(400))*time.Microsecond)
					defer c2()
				}
				switch rng.IntN(4) {
				case 0:
					if seq, err := s.EnqueueEvent(cctx, run, build(run, call, 0, inBuilder)); err == nil && seq > 0 {
						record(run, call, 0, seq)
					} else if err == nil {
						t.Errorf("call %d: EnqueueEvent (0, nil)", call)
					}
				case 1:
					if ok, seq, err := s.EnqueueOnce(cctx, run, fmt.Sprintf("once:%d", call), build(run, call, 0, inBuilder)); err == nil && ok {
						record(run, call, 0, seq)
					}
				case 2:
					var seq int64
					err := s.WriteTx(cctx, func(tx *sql.Tx) error {
						if _, err := tx.ExecContext(cctx, `INSERT INTO spend (call) VALUES (?)`, call); err != nil {
							return err
						}
						var err error
						seq, err = s.EnqueueTx(cctx, tx, run, build(run, call, 0, inBuilder))
						if rng.IntN(4) == 0 {
							cancel()
						}
						return err
					})
					if err == nil {
						record(run, call, 0, seq)
						mu.Lock()
						spends[call] = true
						mu.Unlock()
					}
				case 3:
					seqs, err := s.EnqueueEvents(cctx, run, []outbox.EventBuilder{
						build(run, call, 0, nil), build(run, call, 1, inBuilder), build(run, call, 2, nil)})
					if err == nil {
						for part, seq := range seqs {
							record(run, call, part, seq)
						}
					}
				}
				cancel()
			}
		}()
	}
	relays := map[string]*outbox.Relay{}
	for _, run := range runs {
		relays[run] = outboxtest.FastRelay(t, s, j, run, outbox.WithForgetProjected(false))
	}
	stop := make(chan struct{})
	var flushers sync.WaitGroup
	for i, run := range runs {
		flushers.Add(1)
		go func() {
			defer flushers.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				fctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
				relays[run].Flush(fctx)
				cancel()
			}
		}()
	}
	workers.Wait()
	close(stop)
	flushers.Wait()

	// Acknowledged == stored, per run, with the seq each caller was told.
	stored := map[string]ack{}
	for _, run := range runs {
		lines := storedLines(t, s, path, j.Path(), run)
		if got := outboxtest.SeqsOf(lines); len(got) > 0 && got[len(got)-1] != int64(len(got)) {
			t.Errorf("run %s: stored seqs are not dense: %d lines, last %d", run, len(got), got[len(got)-1])
		}
		for _, l := range lines {
			var a ack
			var r string
			if _, err := fmt.Sscanf(strings.NewReplacer(`"`, " ", ",", " ").Replace(string(l.Line)),
				`{ engine_run_id : %s  seq :%d  call :%d  part :%d}`, &r, &a.seq, &a.call, &a.part); err != nil {
				t.Fatalf("parse %s: %v", l.Line, err)
			}
			a.run = run
			if a.seq != l.Seq {
				t.Errorf("line %s stored at seq %d", l.Line, l.Seq)
			}
			stored[fmt.Sprintf("%d/%d", a.call, a.part)] = a
		}
	}
	for k, a := range acked {
		if got, ok := stored[k]; !ok || got != a {
			t.Errorf("acknowledged %+v, stored %+v (%v)", a, got, ok)
		}
	}
	for k, a := range stored {
		if _, ok := acked[k]; !ok {
			t.Errorf("stored %+v, but its call returned an error", a)
		}
	}
	var nSpend int
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM spend`).Scan(&nSpend)
	}); err != nil {
		t.Fatal(err)
	}
	if nSpend != len(spends) {
		t.Errorf("%d spend rows, %d acknowledged WriteTx calls", nSpend, len(spends))
	}
	// The relays, under the same cancellations, put every line in the journal once.
	for _, run := range runs {
		if err := relays[run].Flush(ctx); err != nil {
			t.Fatalf("final Flush of %s: %v", run, err)
		}
	}
	raw, _ := os.ReadFile(j.Path())
	rep, err := journal.Verify(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Lines != len(stored) || rep.Duplicates != 0 {
		t.Errorf("journal: %d lines and %d duplicates, want %d lines once each", rep.Lines, rep.Duplicates, len(stored))
	}
	t.Logf("%d calls: %d lines acknowledged and stored", calls, len(stored))
	checkUsable(t, s, "a")
}

// storedLines is what the book holds of run: its stored lines, and each projected ledger row, which
// keeps its line's digest and not the line, as the journal holds it, the digest checked.
func storedLines(t *testing.T, s *outbox.Store, path, journalPath, run string) []outbox.EventLine {
	t.Helper()
	lines := outboxtest.AllLines(t, s, run)
	raw, err := os.ReadFile(journalPath)
	if err != nil {
		t.Fatal(err)
	}
	journaled := map[int64][]byte{}
	for _, l := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		if r, seq, err := journal.LineKey(l); err == nil && r == run {
			journaled[seq] = l
		}
	}
	rows, err := outboxtest.RawDB(t, path).Query(`SELECT seq, digest FROM events_outbox
		WHERE engine_run_id = ? AND digest IS NOT NULL`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var digest []byte
		if err := rows.Scan(&seq, &digest); err != nil {
			t.Fatal(err)
		}
		if l, ok := journaled[seq]; !ok || !bytes.Equal(outbox.LineDigest(l), digest) {
			t.Errorf("run %s: the ledger row at seq %d keeps digest %x, the journal holds %q", run, seq, digest, l)
			continue
		}
		lines = append(lines, outbox.EventLine{Seq: seq, Line: journaled[seq]})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(lines, func(a, b outbox.EventLine) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return lines
}

// TestRunsAndRecoverCoverMoreThanAHundredThousandRuns: a book with 100,000 runs holding only ledger rows
// and one more run of unprojected lines; Runs lists every run, and Recover projects the last run
// instead of deleting its lines.
func TestRunsAndRecoverCoverMoreThanAHundredThousandRuns(t *testing.T) {
	if outboxtest.RaceEnabled {
		t.Skip("walks 100,000 runs; make test runs it without the race detector")
	}
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	s.Close()
	d := outboxtest.RawDBRW(t, path)
	const ledgerRuns = 100_000
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	// Each ledger run was projected by a relay, which recorded its progress. Generated inside SQLite:
	// a statement per row costs minutes under the race detector.
	for _, q := range []string{
		`INSERT INTO events_outbox (engine_run_id, seq, line, once_key, announce_key)
		 WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
		 SELECT printf('ledger-%06d', i), 1, printf('{"engine_run_id":"ledger-%06d","seq":1}', i),
		        printf('kledger-%06d', i), printf('kledger-%06d', i) FROM n`,
		`INSERT INTO outbox_progress (engine_run_id, projected)
		 SELECT engine_run_id, 1 FROM events_outbox WHERE engine_run_id > ''`,
	} {
		if _, err := tx.Exec(strings.Replace(q, "?", fmt.Sprint(ledgerRuns), 1)); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		if _, err := tx.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('zz-last', ?, ?)`,
			seq, fmt.Sprintf(`{"engine_run_id":"zz-last","seq":%d}`, seq)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	s, err = outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := collect(s.AllRuns(ctx))
	if err != nil || len(runs) != ledgerRuns+1 || runs[len(runs)-1].RunID != "zz-last" {
		t.Fatalf("Runs: %d runs, %v; want %d ending with zz-last", len(runs), err, ledgerRuns+1)
	}
	n, err := s.LedgerSize(ctx)
	if err != nil || n != ledgerRuns {
		t.Errorf("LedgerSize: (%d, %v), want %d", n, err, ledgerRuns)
	}
	sink := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sink, "new").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got := sink.All()
	if len(got) != 3 || got[2].Seq != 3 {
		t.Errorf("Recover projected %d lines of the last run, want 3", len(got))
	}
	if p, _ := s.Projected(ctx, "zz-last"); p != 3 {
		t.Errorf("zz-last projected to %d, want 3", p)
	}
}

func TestMarkAnnouncedRefusesAKeyPendingOnAnotherRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	ok, seq, err := s.EnqueueOnce(ctx, "r", "K", outboxtest.LineOf("once"))
	if err != nil || !ok || seq != 2 {
		t.Fatalf("EnqueueOnce: (%v, %d, %v)", ok, seq, err)
	}
	err = s.MarkAnnounced(ctx, "r", map[int64]string{1: "K"})
	if !errors.Is(err, outbox.ErrAnnounceConflict) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("MarkAnnounced of a key pending on line 2: %v, want ErrAnnounceConflict naming line 2", err)
	}
	if n := outboxtest.CountRows(t, path, "once_key <> ''"); n != 0 {
		t.Errorf("%d ledger rows after a refused MarkAnnounced", n)
	}
	// The relay then projects both lines once and gives the key to the line that carried it.
	j, err := journal.OpenFile(filepath.Join(t.TempDir(), "j.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := outboxtest.FastRelay(t, s, &lineKeyFixer{j}, "r", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if n := outboxtest.CountRows(t, path, "once_key = 'K' AND seq = 2"); n != 1 {
		t.Error("K is not in the ledger under line 2")
	}
	// A key in the ledger under line 2 is refused for line 1 too.
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: "K"}); !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("MarkAnnounced of a key in the ledger for another line: %v", err)
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

type sinkFunc func(ctx context.Context, runID string, lines []outbox.EventLine) error

func (f sinkFunc) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	return f(ctx, runID, lines)
}

func TestRunIDsAndOnceKeysMustBeWellFormed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	badRuns := map[string]string{
		"empty":             "",
		"invalid UTF-8 ff":  "run\xff",
		"invalid UTF-8 fe":  "run\xfe",
		"NUL":               "run\x00",
		"newline":           "run\n",
		"escape":            "run\x1b[2J",
		"DEL":               "run\x7f",
		"257 bytes":         strings.Repeat("r", outbox.MaxRunIDLen+1),
		"truncated UTF-8":   "run\xc3",
		"surrogate in UTF8": "run\xed\xa0\x80",
	}
	for name, run := range badRuns {
		calls := map[string]error{}
		_, calls["EnqueueEvent"] = s.EnqueueEvent(ctx, run, outboxtest.LineOf("x"))
		_, _, calls["EnqueueOnce"] = s.EnqueueOnce(ctx, run, "k", outboxtest.LineOf("x"))
		_, calls["EnqueueEvents"] = s.EnqueueEvents(ctx, run, []outbox.EventBuilder{outboxtest.LineOf("x")})
		calls["WriteTx+EnqueueTx"] = s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("x")); return err })
		calls["MarkAnnounced"] = s.MarkAnnounced(ctx, run, map[int64]string{1: "k"})
		_, calls["PendingEvents"] = s.PendingEvents(ctx, run, 0, 1)
		_, calls["ForgetEvents"] = s.ForgetEvents(ctx, run)
		_, calls["NewRelay"] = outbox.NewRelay(s, outboxtest.NewMemSink(), run)
		for call, err := range calls {
			if !errors.Is(err, outbox.ErrInvalidRunID) {
				t.Errorf("%s with a run id (%s) %q: %v, want ErrInvalidRunID", call, name, run, err)
			}
		}
	}
	if _, err := s.EnqueueEvent(ctx, strings.Repeat("é", outbox.MaxRunIDLen/2), outboxtest.LineOf("x")); err != nil {
		t.Errorf("a run id of exactly %d bytes: %v", outbox.MaxRunIDLen, err)
	}
	for name, key := range map[string]string{
		"empty": "", "invalid UTF-8": "k\xff", "control": "k\r", "1025 bytes": strings.Repeat("k", outbox.MaxOnceKeyLen+1),
	} {
		if _, _, err := s.EnqueueOnce(ctx, "r", key, outboxtest.LineOf("x")); !errors.Is(err, outbox.ErrInvalidOnceKey) {
			t.Errorf("EnqueueOnce with a key (%s): %v, want ErrInvalidOnceKey", name, err)
		}
		if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: key}); !errors.Is(err, outbox.ErrInvalidOnceKey) {
			t.Errorf("MarkAnnounced with a key (%s): %v, want ErrInvalidOnceKey", name, err)
		}
	}
	// Nothing was stored and no number used.
	if n := outboxtest.CountRows(t, path, "engine_run_id = 'r'"); n != 0 {
		t.Errorf("%d rows of r after refused calls", n)
	}
	if seq := outboxtest.MustEnqueue(t, s, "r"); seq != 1 {
		t.Errorf("first seq of r after refused calls: %d", seq)
	}
}

func TestRecoverNeverForgetsALiveRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		outboxtest.MustEnqueue(t, s, "a")
		outboxtest.MustEnqueue(t, s, "b")
	}
	sinkA := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sinkA, "b", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.FastRelay(t, s, sinkA, "a").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "b")); len(got) != 3 {
		t.Errorf("relay a's Recover left run b with rows %v, want all 3", got)
	}
	if p, _ := s.Projected(ctx, "b"); p != 3 {
		t.Errorf("run b's progress after relay a's Recover: %d, want 3", p)
	}
	if seq := outboxtest.MustEnqueue(t, s, "b"); seq != 4 {
		t.Errorf("run b's next seq: %d, want 4", seq)
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

func TestOpenRefusesAHardLinkedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	s.Close()
	other := filepath.Join(t.TempDir(), "other.db")
	if err := os.Link(path, other); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	before := dirstate.Snapshot(t, filepath.Dir(other))
	for _, p := range []string{other, path} {
		if _, err := outbox.Open(ctx, p); !errors.Is(err, outbox.ErrHardLinked) || !strings.Contains(err.Error(), "2 names") {
			t.Errorf("Open %s with two names: %v, want ErrHardLinked", p, err)
		}
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, filepath.Dir(other))); diff != "" {
		t.Errorf("a refused Open changed the directory (-before +after):\n%s", diff)
	}
	os.Remove(other)
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open with one name again: %v", err)
	}
	s.Close()
}

func TestASchemaNewerThanTheLibraryIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	s.Close()
	known := migrations.Known()
	newer := known[len(known)-1] + 1
	d := outboxtest.RawDBRW(t, path)
	if _, err := d.Exec(`INSERT INTO `+migrations.TableName+` (version_id, is_applied) VALUES (?, 1)`, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Open(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) || !strings.Contains(err.Error(), fmt.Sprint(newer)) {
		t.Errorf("Open: %v, want ErrSchemaMismatch naming version %d", err, newer)
	}
	if _, err := outbox.OpenReadOnly(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) {
		t.Errorf("OpenReadOnly: %v, want ErrSchemaMismatch", err)
	}
	if err := outbox.Migrate(ctx, d); !errors.Is(err, outbox.ErrSchemaMismatch) {
		t.Errorf("Migrate: %v, want ErrSchemaMismatch", err)
	}
}

func TestABookMissingWhatTheProtocolReliesOnIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ drop, names string }{
		{`DROP INDEX events_outbox_once_key`, "events_outbox_once_key"},
		{`DROP INDEX events_outbox_announce_key`, "events_outbox_announce_key"},
		{`DROP INDEX events_outbox_once_key; CREATE INDEX events_outbox_once_key ON events_outbox (once_key)`, "uniqueness"},
		{`ALTER TABLE events_outbox DROP COLUMN enqueued_at`, "events_outbox.enqueued_at"},
		{`DROP TABLE outbox_progress`, "table outbox_progress"},
	} {
		s, path := outboxtest.Setup(t)
		s.Close()
		d := outboxtest.RawDBRW(t, path)
		if _, err := d.Exec(tc.drop); err != nil {
			t.Fatalf("%s: %v", tc.drop, err)
		}
		if _, err := outbox.Open(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("Open after %s: %v, want ErrSchemaMismatch naming %s", tc.drop, err, tc.names)
		}
		if _, err := outbox.OpenReadOnly(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) {
			t.Errorf("OpenReadOnly after %s: %v, want ErrSchemaMismatch", tc.drop, err)
		}
	}
}

func TestDiskFullIsNamedAndStoresNothing(t *testing.T) {
	t.Parallel()
	setupCalls, total := outboxtest.CountCalls(t, 12)
	named := 0
	for at := setupCalls + 1; at <= total; at++ {
		s, _, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.FailAt, v.FailWith = at, sqlite3.FULL })
		acked, err := outboxtest.Workload(s, 12)
		if err != nil && !errors.Is(err, outbox.ErrNotDurable) {
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "full") {
				t.Errorf("disk full at call %d: %v, want an error naming it (ENOSPC)", at, err)
			}
			named++
		}
		s.Close()
		outboxtest.CheckDurable(t, fmt.Sprintf("disk full at call %d", at), path, acked)
	}
	if named == 0 {
		t.Error("no full disk reached a call")
	}
}

func TestErrNotDurableComesWithTheCommittedSeq(t *testing.T) {
	t.Parallel()
	// A deadline far off: under the operation timeout alone, a call a loaded machine keeps waiting
	// would end with the context's error, not with the fault under test.
	ctx := outboxtest.Patient(t)
	setupCalls, total := outboxtest.CountCalls(t, 12)
	seen := 0
	for at := setupCalls + 1; at <= total; at++ {
		s, _, path, name := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.FailAt = at })
		seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x"))
		for i := 0; err == nil && i < 12; i++ {
			seq, err = s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x"))
		}
		s.Close()
		if !errors.Is(err, outbox.ErrNotDurable) {
			continue
		}
		seen++
		if seq == 0 {
			t.Errorf("call %d: ErrNotDurable with seq 0", at)
			continue
		}
		s2, oerr := outbox.Open(ctx, path, outbox.WithVFS(name))
		if oerr != nil {
			t.Fatal(oerr)
		}
		if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s2, "r")); len(got) < int(seq) {
			t.Errorf("call %d: ErrNotDurable for seq %d, but only %v stored", at, seq, got)
		}
		s2.Close()
	}
	if seen == 0 {
		t.Error("no fault hit a WAL sync")
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

// TestAWaitForTheWriterEndsWithTheCallersContext: while a WriteTx holds the one writer connection,
// every write method called with a short deadline, or with none under WithOpTimeout, returns its
// context's error instead of waiting for the writer, with group commit on and off; a call made
// inside the WriteTx function itself (the documented misuse) does the same instead of wedging the
// store; and the store goes on once the WriteTx ends.
func TestAWaitForTheWriterEndsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group), outbox.WithOpTimeout(2*time.Second))
		ctx := context.Background()
		outboxtest.MustEnqueue(t, s, "r")
		release := make(chan struct{})
		holding := make(chan struct{})
		held := make(chan error, 1)
		// A deadline of its own, so the operation timeout does not end the holder first.
		long, cancelLong := context.WithTimeout(ctx, time.Minute)
		defer cancelLong()
		go func() {
			held <- s.WriteTx(long, func(tx *sql.Tx) error {
				close(holding)
				<-release
				return nil
			})
		}()
		<-holding
		calls := map[string]func(context.Context) error{
			"EnqueueEvent": func(c context.Context) error { _, err := s.EnqueueEvent(c, "r", outboxtest.LineOf("x")); return err },
			"EnqueueOnce": func(c context.Context) error {
				_, _, err := s.EnqueueOnce(c, "r", "k", outboxtest.LineOf("x"))
				return err
			},
			"EnqueueEvents": func(c context.Context) error {
				_, err := s.EnqueueEvents(c, "r", []outbox.EventBuilder{outboxtest.LineOf("x")})
				return err
			},
			"MarkAnnounced": func(c context.Context) error { return s.MarkAnnounced(c, "r", map[int64]string{1: "k1"}) },
			"WriteTx":       func(c context.Context) error { return s.WriteTx(c, func(*sql.Tx) error { return nil }) },
			"ForgetEvents":  func(c context.Context) error { _, err := s.ForgetEvents(c, "r"); return err },
		}
		for name, call := range calls {
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			done := make(chan error, 1)
			go func() { done <- call(short) }()
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("group %v: %s behind a held writer: %v, want DeadlineExceeded", group, name, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("group %v: %s waited for the writer past its deadline", group, name)
			}
			cancel()
		}
		// No deadline of its own: the operation timeout ends the wait.
		if err := calls["EnqueueEvent"](ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("group %v: EnqueueEvent with no deadline behind a held writer: %v, want the operation timeout", group, err)
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		// The misuse: a write method called from inside a WriteTx function fails at once, saying so.
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			_, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("inner"))
			return err
		})
		if !errors.Is(err, outbox.ErrCallInsideTx) {
			t.Errorf("group %v: EnqueueEvent inside a WriteTx function: %v, want ErrCallInsideTx", group, err)
		}
		checkUsable(t, s, "r")
		if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); got[1] != 2 {
			t.Errorf("group %v: seqs after the waits: %v", group, got)
		}
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
