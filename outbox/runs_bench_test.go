// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// benchRunsBook builds a book of many finished runs, each holding its ledger rows and nothing else
// pending: what a year of engine starts leaves behind. OUTBOX_BENCH_RUNS and OUTBOX_BENCH_KEYS size
// it (default 100,000 runs and 1,000,000 keys; -short: 1,000 and 10,000). It is built with bulk
// SQL, through the triggers that keep the per-run figures, as the relay would have left it.
func benchRunsBook(b *testing.B) (path string, runs, keys int) {
	b.Helper()
	runs, keys = 100_000, 1_000_000
	if testing.Short() {
		runs, keys = 1_000, 10_000
	}
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_KEYS")); err == nil && n > 0 {
		keys = n
	}
	path = filepath.Join(b.TempDir(), "book.db")
	began := time.Now()
	if err := buildRunsBook(path, runs, keys); err != nil {
		b.Fatal(err)
	}
	st, _ := os.Stat(path)
	b.Logf("built a book of %d runs and %d keys in %v: %d bytes", runs, keys, time.Since(began).Round(time.Millisecond), st.Size())
	return path, runs, keys
}

func buildRunsBook(path string, runs, keys int) error {
	ctx := context.Background()
	s, err := outbox.Open(ctx, path)
	if err != nil {
		return err
	}
	s.Close()
	w, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		return err
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	per := keys / runs
	for _, q := range []string{
		`PRAGMA synchronous = OFF`,
		fmt.Sprintf(`WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM r WHERE n < %d - 1),
		              q(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM q WHERE seq < %d)
		INSERT INTO events_outbox (engine_run_id, seq, line, once_key)
		SELECT printf('run-%%08d', n), seq,
		       printf('{"engine_run_id":"run-%%08d","seq":%%d,"type":"unit_done","data":{"unit":%%d}}', n, seq, n * %d + seq),
		       printf('unit:%%d', n * %d + seq)
		FROM r, q ORDER BY 1, 2`, runs, per, per, per),
		fmt.Sprintf(`INSERT INTO outbox_progress (engine_run_id, projected, last_seq)
		SELECT engine_run_id, %d, %d FROM outbox_runs`, per, per),
		`UPDATE outbox_runs SET forgotten = projected WHERE engine_run_id >= ''`,
		`PRAGMA wal_checkpoint(TRUNCATE)`,
	} {
		if _, err := w.Exec(q); err != nil {
			return fmt.Errorf("%.60s: %w", q, err)
		}
	}
	return nil
}

// BenchmarkListingRuns reads a book of finished runs as a start, `outbox stats` and a scrape do,
// each beside its baseline, the query every one of them ran before the per-run figures: the GROUP BY
// over every stored row (db.EventsRuns, paged), with the ledger counted along its index.
//
//	recover-nothing-pending: NewRelay and Recover over the book (nothing to project or forget);
//	scrape: what `outbox metrics` reads (Store.Totals and the open runs);
//	stats: every run that holds rows, a page at a time (AllRuns), with the totals;
//	group-by-before: the pages of the old query over the same book, and the ledger's count.
func BenchmarkListingRuns(b *testing.B) {
	path, runs, keys := benchRunsBook(b)
	ctx := context.Background()
	name := fmt.Sprintf("runs=%d/keys=%d", runs, keys)
	b.Run(name+"/recover-nothing-pending", func(b *testing.B) {
		s, err := outbox.Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sink := outboxtest.NewMemSink()
		b.ResetTimer()
		for i := range b.N {
			r, err := outbox.NewRelay(s, sink, fmt.Sprintf("bench-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Recover(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/scrape", func(b *testing.B) {
		s, err := outbox.OpenReadOnly(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if _, err := s.Totals(ctx); err != nil {
				b.Fatal(err)
			}
			for _, err := range s.OpenRuns(ctx) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run(name+"/stats", func(b *testing.B) {
		s, err := outbox.OpenReadOnly(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if _, err := s.Totals(ctx); err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, err := range s.AllRuns(ctx) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != runs {
				b.Fatalf("%d runs listed, want %d", n, runs)
			}
		}
	})
	b.Run(name+"/group-by-before", func(b *testing.B) {
		d, err := outbox.OpenReadOnlyDB(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		q := db.New()
		for b.Loop() {
			n := 0
			for after := ""; ; {
				page, err := q.EventsRuns(ctx, d, db.EventsRunsParams{AfterRun: after, MaxRuns: 512})
				if err != nil {
					b.Fatal(err)
				}
				n += len(page)
				if len(page) < 512 {
					break
				}
				after = page[len(page)-1].EngineRunID
			}
			if _, err := q.EventsLedgerSize(ctx, d); err != nil {
				b.Fatal(err)
			}
			if n != runs {
				b.Fatalf("%d runs listed, want %d", n, runs)
			}
		}
	})
}

// BenchmarkRecoverForgetsAnEarlierRunsRows: an earlier run kept its projected rows
// (OUTBOX_BENCH_FORGET_ROWS, default 4,000,000; -short: 10,000), and the next start's Recover,
// under the default operation timeout and WAL size limit, forgets them in bounded steps. Its baseline
// is what the start did before: one DELETE of them all in one transaction, on the same book. Each
// reports the WAL's peak size (wal-peak-MiB), sampled every millisecond.
func BenchmarkRecoverForgetsAnEarlierRunsRows(b *testing.B) {
	rows := 4_000_000
	if testing.Short() {
		rows = 10_000
	}
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_FORGET_ROWS")); err == nil && n > 0 {
		rows = n
	}
	ctx := context.Background()
	for _, steps := range []bool{true, false} {
		name := fmt.Sprintf("rows=%d/steps", rows)
		if !steps {
			name = fmt.Sprintf("rows=%d/one-transaction-before", rows)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				path := filepath.Join(b.TempDir(), "book.db")
				s, err := outbox.Open(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				w, err := sql.Open("sqlite3", "file:"+path)
				if err != nil {
					b.Fatal(err)
				}
				w.SetMaxOpenConns(1)
				for _, q := range []string{
					fmt.Sprintf(`WITH RECURSIVE s(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < %d)
					INSERT INTO events_outbox (engine_run_id, seq, line)
					SELECT 'old', seq, printf('{"engine_run_id":"old","seq":%%d,"type":"tick","data":"%%s"}', seq, hex(zeroblob(60))) FROM s`, rows),
					fmt.Sprintf(`INSERT INTO outbox_progress (engine_run_id, projected) VALUES ('old', %d)`, rows),
					`PRAGMA wal_checkpoint(TRUNCATE)`,
				} {
					if _, err := w.Exec(q); err != nil {
						b.Fatal(err)
					}
				}
				w.Close()
				stop := watchWAL(path)
				b.StartTimer()
				if steps {
					s, err := outbox.Open(ctx, path)
					if err != nil {
						b.Fatal(err)
					}
					r, err := outbox.NewRelay(s, outboxtest.NewMemSink(), "new")
					if err != nil {
						b.Fatal(err)
					}
					if err := r.Recover(ctx); err != nil {
						b.Fatal(err)
					}
					s.Close()
				} else {
					d, err := sql.Open("sqlite3", "file:"+path+"?_pragma=journal_size_limit(67108864)")
					if err != nil {
						b.Fatal(err)
					}
					if _, err := d.Exec(`DELETE FROM events_outbox WHERE engine_run_id = 'old' AND seq <= ? AND once_key = ''`, rows); err != nil {
						b.Fatal(err)
					}
					d.Close()
				}
				b.StopTimer()
				b.ReportMetric(float64(stop())/(1<<20), "wal-peak-MiB")
				b.StartTimer()
			}
		})
	}
}

// watchWAL samples the size of path's WAL every millisecond until stop, which returns the peak.
func watchWAL(path string) (stop func() int64) {
	var max int64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if st, err := os.Stat(path + "-wal"); err == nil && st.Size() > max {
				max = st.Size()
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		return max
	}
}
