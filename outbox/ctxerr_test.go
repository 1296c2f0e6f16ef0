// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// Calls of every kind, each with a context that ends at a random moment (before the call, after a
// random short delay, at a random deadline, inside a builder or a WriteTx function), beside relays
// flushing and recovering under the same: every call that fails says why in terms a caller branches
// on, its context's error (context.Canceled or context.DeadlineExceeded) whatever statement SQLite
// interrupted, never the driver's bare "interrupted". Nothing here asserts when a context ends, only
// what a call that met its end returns.
func TestEveryCallWhoseContextEndsFailsWithTheContextsErrorNeverABareInterrupt(t *testing.T) {
	t.Parallel()
	calls := 2000
	if testing.Short() {
		calls = 600
	}
	s, _ := outboxtest.Setup(t)
	setupCtx := outboxtest.Patient(t)
	if err := s.WriteTx(setupCtx, func(tx *sql.Tx) error {
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
	for _, run := range runs {
		if _, err := s.EnqueueEvent(setupCtx, run, journal.Builder(run, "first", 0)); err != nil {
			t.Fatal(err)
		}
	}

	var (
		failed, ended atomic.Int64
		mu            sync.Mutex
		leaks         = map[string]int{}
	)
	// check is what every call is held to. A call whose context did not end may still fail with
	// ErrAnnounceConflict or ErrProjected (a relay took the line first), which are no context's.
	check := func(what string, ctx context.Context, err error) {
		if err == nil {
			return
		}
		failed.Add(1)
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			ended.Add(1)
			return
		}
		if errors.Is(err, outbox.ErrProjected) || errors.Is(err, outbox.ErrAnnounceConflict) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if leaks[what]++; leaks[what] <= 3 {
			t.Errorf("%s with a context that ended (%v): %v, want an error wrapping the context's", what, ctx.Err(), err)
		}
	}
	line := func(run string, call int, cancel context.CancelFunc) outbox.EventBuilder {
		return func(seq int64) ([]byte, error) {
			if cancel != nil {
				cancel()
			}
			return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"call":%d}`, run, seq, call), nil
		}
	}

	var next atomic.Int64
	var workers sync.WaitGroup
	for w := range 6 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for {
				call := int(next.Add(1))
				if call > calls {
					return
				}
				run := runs[rng.IntN(len(runs))]
				ctx, cancel, inside := outboxtest.EndingContext(rng)
				switch rng.IntN(20) {
				case 0:
					_, err := s.EnqueueEvent(ctx, run, line(run, call, inside))
					check("EnqueueEvent", ctx, err)
				case 1:
					_, _, err := s.EnqueueOnce(ctx, run, fmt.Sprintf("once:%d", call), line(run, call, inside))
					check("EnqueueOnce", ctx, err)
				case 2:
					_, err := s.EnqueueEvents(ctx, run, []outbox.EventBuilder{line(run, call, nil), line(run, call, inside)})
					check("EnqueueEvents", ctx, err)
				case 3:
					err := s.WriteTx(ctx, func(tx *sql.Tx) error {
						if _, err := tx.ExecContext(ctx, `INSERT INTO spend (call) VALUES (?)`, call); err != nil {
							return err
						}
						_, err := s.EnqueueTx(ctx, tx, run, line(run, call, inside))
						return err
					})
					check("WriteTx", ctx, err)
				case 4:
					err := s.ReadTx(ctx, func(tx *sql.Tx) error {
						var n int
						return tx.QueryRowContext(ctx, `SELECT count(*) FROM spend`).Scan(&n)
					})
					check("ReadTx", ctx, err)
				case 5:
					_, err := s.PendingEvents(ctx, run, 0, 100)
					check("PendingEvents", ctx, err)
				case 6:
					_, err := s.Run(ctx, run)
					check("Run", ctx, err)
				case 7:
					_, err := s.Totals(ctx)
					check("Totals", ctx, err)
				case 8:
					for _, err := range s.AllRuns(ctx) {
						if err != nil {
							check("AllRuns", ctx, err)
							break
						}
					}
				case 9:
					_, err := s.StoredDigests(ctx, run, 0, 100)
					check("StoredDigests", ctx, err)
				case 10:
					_, err := s.LedgerSize(ctx)
					check("LedgerSize", ctx, err)
				case 11:
					_, err := s.Projected(ctx, run)
					check("Projected", ctx, err)
				case 12:
					err := s.RetireEvent(ctx, run, int64(rng.IntN(40)+1), "cancelled at random")
					if !errors.Is(err, outbox.ErrUnknownEvent) {
						check("RetireEvent", ctx, err)
					}
				case 13:
					_, err := s.EventsUsed(ctx, run)
					check("EventsUsed", ctx, err)
				case 14:
					_, _, err := s.StoredDigestAt(ctx, run, int64(rng.IntN(40)+1))
					check("StoredDigestAt", ctx, err)
				case 15:
					_, _, err := s.RunOf(ctx, run)
					check("RunOf", ctx, err)
				case 16:
					_, _, err := s.BookLacks(ctx, []outbox.SinkRun{{RunID: run, LastSeq: 1}}, 10)
					check("BookLacks", ctx, err)
				case 17:
					_, err := s.AnnouncedOnceKeys(ctx)
					check("AnnouncedOnceKeys", ctx, err)
				case 18:
					for _, err := range s.OpenRuns(ctx) {
						if err != nil {
							check("OpenRuns", ctx, err)
							break
						}
					}
				case 19:
					_, _, err := s.EnqueueOnce(ctx, run, "once:shared", line(run, call, inside))
					check("EnqueueOnce of a key already stored", ctx, err)
				}
				cancel()
			}
		}()
	}
	stop := make(chan struct{})
	var relays sync.WaitGroup
	for i, run := range runs {
		r := outboxtest.FastRelay(t, s, j, run, outbox.WithBatchSize(4))
		relays.Add(1)
		go func() {
			defer relays.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 17))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel, _ := outboxtest.EndingContext(rng)
				if rng.IntN(4) == 0 {
					check("Recover", ctx, r.Recover(ctx))
				} else {
					check("Flush", ctx, r.Flush(ctx))
				}
				cancel()
			}
		}()
	}
	workers.Wait()
	close(stop)
	relays.Wait()
	t.Logf("%d calls failed, %d of them with their context's error; leaks by call: %v", failed.Load(), ended.Load(), leaks)
	if _, err := s.EnqueueEvent(setupCtx, "a", journal.Builder("a", "after", 0)); err != nil {
		t.Fatalf("EnqueueEvent after the cancellations: %v", err)
	}
}

// BookLacks reads its lookups in one transaction of a read connection: one whose context ends while
// it reads gives the connection back to the pool outside that transaction, so that the next read on
// it (the pool holds one) sees the last commit, not the old snapshot, and begins at all.
func TestABookCheckWhoseContextEndsMidReadLeavesTheReadConnectionOnNoOldSnapshot(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t, outbox.WithReadPoolSize(1))
	patient := outboxtest.Patient(t)
	runs := make([]outbox.SinkRun, 3000)
	for i := range runs {
		runs[i] = outbox.SinkRun{RunID: fmt.Sprintf("run-%04d", i), LastSeq: 0}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	ended := 0
	for i := range 60 {
		ctx, cancel := context.WithCancel(patient)
		time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
		_, _, err := s.BookLacks(ctx, runs, 0)
		cancel()
		if err != nil {
			ended++
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("BookLacks %d: %v, want an error wrapping context.Canceled", i, err)
			}
		}
		seq, err := s.EnqueueEvent(patient, "a", outboxtest.LineOf("x"))
		if err != nil {
			t.Fatal(err)
		}
		total, lacks, err := s.BookLacks(patient, []outbox.SinkRun{{RunID: "a", LastSeq: seq}}, 1)
		if err != nil || total != 0 {
			t.Fatalf("after %d checks that met their context's end, the book lacks %v of run a up to seq %d (%v), just stored", ended, lacks, seq, err)
		}
	}
	t.Logf("%d of 60 checks met their context's end", ended)
}
