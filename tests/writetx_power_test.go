// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// writeTxWorkload runs producers concurrent WriteTx callers, each transaction a row of the caller's
// own table and an event enqueued in it, and returns what each call acknowledged: the event's bytes by
// run and seq. The writer goes back to the next caller before a call's WAL sync, so acknowledged
// calls here are the ones a power cut between a commit and its sync would lose if a call returned
// before its own sync.
func writeTxWorkload(s *outbox.Store, producers, calls int) map[string]map[int64][]byte {
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS work (run TEXT NOT NULL, seq INTEGER NOT NULL)`)
		return err
	}); err != nil {
		return nil
	}
	var mu sync.Mutex
	acked := map[string]map[int64][]byte{}
	var wg sync.WaitGroup
	for p := range producers {
		run := fmt.Sprintf("p%d", p)
		mu.Lock()
		acked[run] = map[int64][]byte{}
		mu.Unlock()
		wg.Go(func() {
			for range calls {
				var line []byte
				var seq int64
				err := s.WriteTx(ctx, func(tx *sql.Tx) error {
					var err error
					seq, err = s.EnqueueTx(ctx, tx, run, func(seq int64) ([]byte, error) {
						line = fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d}`, run, seq)
						return line, nil
					})
					if err != nil {
						return err
					}
					_, err = tx.ExecContext(ctx, `INSERT INTO work (run, seq) VALUES (?, ?)`, run, seq)
					return err
				})
				if err != nil {
					return
				}
				mu.Lock()
				acked[run][seq] = line
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

// TestPowerLossBesideConcurrentWriteTxCallersKeepsEveryAcknowledgedCall cuts the power at writes and
// syncs spread over a workload of eight concurrent WriteTx callers: every call that returned has its
// event and its own row after the cut, whichever caller's sync covered it.
func TestPowerLossBesideConcurrentWriteTxCallersKeepsEveryAcknowledgedCall(t *testing.T) {
	t.Parallel()
	const producers, calls = 8, 6
	s, v, _, _ := outboxtest.FaultStore(t, func(*faultvfs.VFS) {})
	setup := v.Calls()
	writeTxWorkload(s, producers, calls)
	total := v.Calls()
	s.Close()
	step := max(1, (total-setup)/30)
	cuts, checked := 0, 0
	for cut := setup + 1; cut <= total; cut += step {
		s, v, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.Cut = cut })
		acked := writeTxWorkload(s, producers, calls)
		s.Close()
		if !v.Off() {
			continue // the calls interleave differently from run to run: this one made fewer writes
		}
		if err := v.Crash(); err != nil {
			t.Fatal(err)
		}
		label := fmt.Sprintf("cut %d (of %d)", cut, total)
		after, err := outbox.Open(context.Background(), path)
		if err != nil {
			t.Fatalf("%s: reopen: %v", label, err)
		}
		d := outboxtest.RawDB(t, path)
		for run, lines := range acked {
			stored := map[int64][]byte{}
			for _, l := range outboxtest.AllLines(t, after, run) {
				stored[l.Seq] = l.Line
			}
			for seq, line := range lines {
				checked++
				if !bytes.Equal(stored[seq], line) {
					t.Errorf("%s: acknowledged event %d of run %q is lost or changed", label, seq, run)
				}
				var n int
				if err := d.QueryRow(`SELECT count(*) FROM work WHERE run = ? AND seq = ?`, run, seq).Scan(&n); err != nil || n != 1 {
					t.Errorf("%s: the caller's row of acknowledged event %d of run %q: %d rows, %v", label, seq, run, n, err)
				}
			}
		}
		d.Close()
		after.Close()
		cuts++
	}
	if cuts < 10 || checked == 0 {
		t.Errorf("only %d power cuts landed, %d acknowledged calls checked", cuts, checked)
	}
	t.Logf("%d power cuts over %d writes and syncs, %d acknowledged calls checked", cuts, total-setup, checked)
}
