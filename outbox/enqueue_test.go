// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestShortDeadlinesNeverStoreAFailedCallOrLoseAnAcknowledgedOne: calls with deadlines of 0 to 2 ms and
// a small operation timeout, on every path: a call told it succeeded is stored under its seq with its
// line; a call told it failed is not stored; the numbers stay dense.
func TestShortDeadlinesNeverStoreAFailedCallOrLoseAnAcknowledgedOne(t *testing.T) {
	for _, p := range enqueuePaths {
		t.Run(p.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "book.db")
			// Open's own context has a deadline, so the small operation timeout bounds the calls,
			// not Open's migrations on a loaded machine.
			octx, ocancel := context.WithTimeout(context.Background(), time.Minute)
			s, err := outbox.Open(octx, path, append([]outbox.Option{outbox.WithOpTimeout(time.Millisecond)}, p.opts...)...)
			ocancel()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			foreignDBOf(t, path) // migrated before the deadlines start
			calls := 60
			got := newOutcomes()
			var wg sync.WaitGroup
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < calls/3; i++ {
						id := fmt.Sprintf("w%d-c%d", w, i)
						// Deadlines of 0, 1 and 2 ms, and none: then the operation timeout bounds
						// the call.
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Millisecond)
						if i%4 == 3 {
							ctx, cancel = context.WithCancel(context.Background())
						}
						seq, err := p.enqueue(t, s, path, ctx, func(seq int64) ([]byte, error) {
							return fmt.Appendf(nil, "%s %d", id, seq), nil
						})
						cancel()
						got.record(id, seq, err)
					}
				}()
			}
			wg.Wait()
			stored := map[string]int64{}
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			defer rcancel()
			lines, err := s.PendingEvents(rctx, "r", 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range lines {
				if l.Seq != int64(i+1) {
					t.Fatalf("seqs %v are not dense", outboxtest.SeqsOf(lines))
				}
				id, seq, ok := strings.Cut(string(l.Line), " ")
				if !ok || seq != fmt.Sprint(l.Seq) {
					t.Fatalf("line %d is %q", l.Seq, l.Line)
				}
				stored[id] = l.Seq
			}
			t.Logf("%d of %d calls stored", got.check(t, stored), got.len())
		})
	}
}

// TestAnInsertThatFailsAfterWritingLeavesNoRow: a trigger's RAISE(FAIL) fails the insert but keeps the
// row it wrote. The call is told it failed, so the row must not stay, in a group whose other calls
// commit or in a transaction of its own, with a small line or a large one stored apart.
func TestAnInsertThatFailsAfterWritingLeavesNoRow(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, path := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`CREATE TRIGGER fail_bad AFTER INSERT ON events_outbox
					WHEN NEW.engine_run_id = 'bad' BEGIN SELECT RAISE(FAIL, 'refused after'); END`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			large := outboxtest.ConstLine([]byte(`{"large":"` + strings.Repeat("x", 2000) + `"}`))
			var wg sync.WaitGroup
			var failed, stored atomic.Int64
			for w := 0; w < 8; w++ {
				run := "r"
				if w < 2 {
					run = "bad"
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						build := outboxtest.LineOf("x")
						if i%2 == 1 {
							build = large
						}
						_, err := s.EnqueueEvent(ctx, run, build)
						switch {
						case run == "bad" && err == nil:
							t.Errorf("an insert the trigger failed was acknowledged")
						case run == "bad":
							failed.Add(1)
						case err != nil:
							t.Errorf("run r: %v", err)
						default:
							stored.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if n := len(outboxtest.AllLines(t, s, "bad")); n != 0 {
				t.Errorf("%d calls told they failed, %d rows of theirs stored", failed.Load(), n)
			}
			if n := int64(len(outboxtest.AllLines(t, s, "r"))); n != stored.Load() {
				t.Errorf("run r: %d rows stored, %d acknowledged", n, stored.Load())
			}
			var orphans int
			if err := outboxtest.RawDB(t, path).QueryRow(
				`SELECT count(*) FROM events_lines WHERE id NOT IN (SELECT spill FROM events_outbox)`).Scan(&orphans); err != nil {
				t.Fatal(err)
			}
			if orphans != 0 {
				t.Errorf("%d large lines left without their row", orphans)
			}
		})
	}
}

// TestAnInsertATriggerIgnoredIsNotReportedAsStored: RAISE(IGNORE) in a BEFORE INSERT trigger skips the
// insert without an error. The call must not be acknowledged with a seq that holds no line, and the
// next call must still be numbered densely.
func TestAnInsertATriggerIgnoredIsNotReportedAsStored(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`CREATE TRIGGER ignore_bad BEFORE INSERT ON events_outbox
					WHEN NEW.engine_run_id = 'r' AND (CAST(NEW.line AS TEXT) = '{"skip":1}' OR NEW.spill <> 0) BEGIN SELECT RAISE(IGNORE); END`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine([]byte(`{"skip":1}`)))
			if err == nil {
				t.Errorf("an insert the trigger ignored: EnqueueEvent returned seq %d, nil; run r holds %d lines",
					seq, len(outboxtest.AllLines(t, s, "r")))
			}
			large := []byte(`{"skip":"` + strings.Repeat("x", 2000) + `"}`)
			if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(large)); err == nil {
				t.Errorf("a large insert the trigger ignored: EnqueueEvent returned seq %d, nil", seq)
			}
			var spilled int
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				return tx.QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled)
			}); err != nil || spilled != 0 {
				t.Errorf("events_lines holds %d lines (%v) after the ignored large insert, want 0", spilled, err)
			}
			if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("next")); err != nil || seq != 1 {
				t.Errorf("the next EnqueueEvent: seq %d, %v; want 1, nil", seq, err)
			}
			checkDense(t, s, 1)
		})
	}
}
