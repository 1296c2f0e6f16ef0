// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

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

// Run's context cancelled at any moment (before a batch, during an append, while a record is in
// flight) costs nothing twice: each Run returns context.Canceled, and what the sink took is recorded
// or re-sent by no one.
func TestRunCancelledAtAnyMomentSendsNothingTwice(t *testing.T) {
	slowRecords(t)
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j := openJournal(t, path)
	sink := &hookedSink{sink: j, before: func(call int, _ context.Context, _ []outbox.EventLine) error {
		time.Sleep(time.Duration(call%3) * time.Millisecond)
		return nil
	}}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(3))
	for i := range 40 {
		enqueueSpends(t, s, 10)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i%8)*time.Millisecond, cancel)
		if err := r.Run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run %d: %v, want context.Canceled", i, err)
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := verifyFile(t, path); v.Lines != 400 || v.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want 400 and 0", v.Lines, v.Duplicates)
	}
}

// Recover over many earlier runs, its context cancelled again and again at any moment: each attempt goes on where the last one stopped, and once one finishes the
// journal holds every line once and the book none of the earlier runs' rows.
func TestRecoverCancelledAtAnyMomentOverManyRunsSendsNothingTwice(t *testing.T) {
	const runs, perRun = 12, 9
	slowRecords(t)
	ctx := context.Background()
	s := openStore(t)
	for i := range runs {
		run := fmt.Sprintf("earlier-%02d", i)
		builds := make([]outbox.EventBuilder, perRun)
		for k := range builds {
			builds[k] = journal.Builder(run, "spend", k)
		}
		if _, err := s.EnqueueEvents(ctx, run, builds); err != nil {
			t.Fatal(err)
		}
	}
	s = outboxtest.Reopen(t, s)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	r := outboxtest.NewRelay(t, s, openJournal(t, path), "next", outbox.WithBatchSize(4))
	progressed := 0
	for i := 0; ; i++ {
		cctx, cancel := context.WithCancel(ctx)
		if i < 100 { // then one to the end
			time.AfterFunc(time.Duration(i%12)*time.Millisecond, cancel)
		}
		if v := verifyFile(t, path); v.Lines > 0 && v.Lines < runs*perRun {
			progressed++
		}
		err := r.Recover(cctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Recover %d: %v, want context.Canceled or nil", i, err)
		}
	}
	if v := verifyFile(t, path); v.Lines != runs*perRun || v.Duplicates != 0 {
		t.Errorf("the journal holds %d lines and %d duplicates, want %d and 0", v.Lines, v.Duplicates, runs*perRun)
	}
	t.Logf("%d attempts began part of the way through", progressed)
	if kept := outboxtest.CountRows(t, s.Path(), "1"); kept != 0 {
		t.Errorf("the book keeps %d rows of the earlier runs, want 0", kept)
	}
}
