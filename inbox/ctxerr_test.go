// SPDX-License-Identifier: Apache-2.0

package inbox_test

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

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// Calls of every kind, each with a context that ends at a random moment (before the call, after a
// random short delay, at a random deadline, inside a handler or a WriteTx function), beside readers
// of a segmented journal under the same: every call that fails says why in terms a caller branches
// on, its context's error (context.Canceled or context.DeadlineExceeded) whatever statement SQLite
// interrupted, never the driver's bare "interrupted". Nothing here asserts when a context ends, only
// what a call that met its end returns.
func TestEveryInboxCallWhoseContextEndsFailsWithTheContextsErrorNeverABareInterrupt(t *testing.T) {
	t.Parallel()
	calls := 1500
	if testing.Short() {
		calls = 400
	}
	in, _ := setup(t)
	patient, stopPatient := context.WithTimeout(context.Background(), 10*time.Minute)
	defer stopPatient()
	dir := filepath.Join(t.TempDir(), "journal")
	j, err := journal.Open(dir, journal.WithSegmentSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for k := int64(1); k <= 200; k++ {
		if err := j.Append(patient, "j", []outbox.EventLine{{Seq: k, Line: line("j", k)}}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		failed, ended atomic.Int64
		mu            sync.Mutex
		leaks         = map[string]int{}
	)
	check := func(what string, ctx context.Context, err error) {
		if err == nil {
			return
		}
		failed.Add(1)
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			ended.Add(1)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if leaks[what]++; leaks[what] <= 3 {
			t.Errorf("%s with a context that ended (%v): %v, want an error wrapping the context's", what, ctx.Err(), err)
		}
	}
	handler := func(inside context.CancelFunc) inbox.Handler {
		n := 0
		return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			if n++; n == 3 && inside != nil {
				inside()
			}
			return insertHandler(ctx, tx, ev)
		}
	}

	var next atomic.Int64
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 19))
			run := fmt.Sprintf("w%d", w)
			for next.Add(1) <= int64(calls) {
				ctx, cancel, inside := outboxtest.EndingContext(rng)
				switch rng.IntN(12) {
				case 0, 1, 2:
					pos, err := in.Position(patient, run)
					if err != nil {
						t.Error(err)
						return
					}
					_, err = in.Apply(ctx, lines(run, pos+1, pos+8), handler(inside))
					check("Apply", ctx, err)
				case 3:
					err := in.WriteTx(ctx, func(tx *sql.Tx) error {
						if inside != nil {
							inside()
						}
						var n int
						return tx.QueryRowContext(ctx, `SELECT count(*) FROM applied`).Scan(&n)
					})
					check("WriteTx", ctx, err)
				case 4:
					err := in.ReadTx(ctx, func(tx *sql.Tx) error {
						if inside != nil {
							inside()
						}
						var n int
						return tx.QueryRowContext(ctx, `SELECT count(*) FROM applied`).Scan(&n)
					})
					check("ReadTx", ctx, err)
				case 5:
					_, err := in.Position(ctx, run)
					check("Position", ctx, err)
				case 6:
					_, err := in.Sources(ctx)
					check("Sources", ctx, err)
				case 7:
					_, err := in.Quarantined(ctx)
					check("Quarantined", ctx, err)
				case 8:
					for _, err := range in.AllRuns(ctx) {
						if err != nil {
							check("AllRuns", ctx, err)
							break
						}
					}
				case 9:
					_, err := in.RunCount(ctx)
					check("RunCount", ctx, err)
				case 10:
					_, err := in.ApplyJournal(ctx, dir, handler(inside))
					check("ApplyJournal", ctx, err)
				case 11:
					// A follower ends only with its context: one meant to end inside the handler also
					// ends from outside, since the journal may hold nothing left for the handler.
					fctx, fcancel := ctx, context.CancelFunc(func() {})
					if inside != nil {
						fctx, fcancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(20))*time.Millisecond)
					}
					err := in.FollowJournal(fctx, dir, handler(inside))
					if !errors.Is(err, fctx.Err()) {
						check("FollowJournal", fctx, err)
					}
					fcancel()
				}
				cancel()
			}
		}()
	}
	workers.Wait()
	t.Logf("%d calls failed, %d of them with their context's error; leaks by call: %v", failed.Load(), ended.Load(), leaks)
	if _, err := in.ApplyJournal(patient, dir, insertHandler); err != nil {
		t.Fatalf("ApplyJournal after the cancellations: %v", err)
	}
	if got := position(t, in, "j"); got != 200 {
		t.Fatalf("the journal's run is at %d after a patient ApplyJournal, want 200", got)
	}
}
