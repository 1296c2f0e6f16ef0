// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// A line the size of a real event (about 200 bytes).
var benchLine = []byte(`{"engine_run_id":"run-0123456789abcdef","seq":1,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":"u-000123","amount":1234}}` + strings.Repeat(" ", 60))

func benchBuild(int64) ([]byte, error) { return benchLine, nil }

// baselineDB opens path the way a careful hand-written program would: one connection, BEGIN
// IMMEDIATE, WAL, the given synchronous level, the migrated schema.
func baselineDB(b *testing.B, path, sync string) *sql.DB {
	b.Helper()
	d, err := driver.Open("file:"+path+"?_txlock=immediate", func(c *sqlite3.Conn) error {
		return c.Exec("PRAGMA busy_timeout=5000; PRAGMA journal_mode=WAL; PRAGMA synchronous=" + sync)
	})
	if err != nil {
		b.Fatal(err)
	}
	d.SetMaxOpenConns(1)
	if err := migrations.Up(context.Background(), d); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func openBench(b *testing.B, path string, opts ...outbox.Option) *outbox.Store {
	b.Helper()
	s, err := outbox.Open(context.Background(), path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// baselineEnqueue is the store's enqueue written directly against database/sql.
func baselineEnqueue(ctx context.Context, d *sql.DB, runID string) error {
	tx, err := d.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var next int64
	if err := tx.QueryRowContext(ctx, db.EventLastSeq, runID).Scan(&next); err != nil {
		return err
	}
	next++
	if _, err := tx.ExecContext(ctx, db.EventInsert, runID, next, benchLine, "", time.Now().UnixMilli(), 0); err != nil {
		return err
	}
	return tx.Commit()
}

func BenchmarkEnqueueEvent(b *testing.B) {
	ctx := context.Background()
	for _, level := range []struct {
		name string
		opt  outbox.Durability
	}{{"FULL", outbox.DurabilityFull}, {"NORMAL", outbox.DurabilityNormal}} {
		b.Run(level.name+"/baseline", func(b *testing.B) {
			d := baselineDB(b, filepath.Join(b.TempDir(), "b.db"), level.name)
			for b.Loop() {
				if err := baselineEnqueue(ctx, d, "run"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(level.name+"/outbox", func(b *testing.B) {
			s := openBench(b, filepath.Join(b.TempDir(), "o.db"), outbox.WithDurability(level.opt))
			for b.Loop() {
				if _, err := s.EnqueueEvent(ctx, "run", benchBuild); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEnqueueOnce(b *testing.B) {
	ctx := context.Background()
	b.Run("baseline", func(b *testing.B) {
		d := baselineDB(b, filepath.Join(b.TempDir(), "b.db"), "FULL")
		i := 0
		for b.Loop() {
			i++
			key := fmt.Sprintf("unit_done:%d", i)
			err := func() error {
				tx, err := d.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				var found int64
				if err := tx.QueryRowContext(ctx, db.EventsOnceKeyExists, key).Scan(&found); err != nil || found != 0 {
					return err
				}
				var next int64
				if err := tx.QueryRowContext(ctx, db.EventLastSeq, "run").Scan(&next); err != nil {
					return err
				}
				next++
				if _, err := tx.ExecContext(ctx, db.EventInsert, "run", next, benchLine, key, time.Now().UnixMilli(), 0); err != nil {
					return err
				}
				return tx.Commit()
			}()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("outbox", func(b *testing.B) {
		s := openBench(b, filepath.Join(b.TempDir(), "o.db"))
		i := 0
		for b.Loop() {
			i++
			if _, _, err := s.EnqueueOnce(ctx, "run", fmt.Sprintf("unit_done:%d", i), benchBuild); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// prefilledStore opens a store whose table already holds size rows of 100 earlier runs. They are
// written at synchronous=OFF for speed, then checkpointed and synced, so that the benchmark's first
// fsync does not flush hundreds of megabytes the prefill left dirty in the page cache.
func prefilledStore(b *testing.B, size int) *outbox.Store {
	b.Helper()
	path := filepath.Join(b.TempDir(), "g.db")
	d := baselineDB(b, path, "OFF")
	for r := 0; r < 100; r++ {
		fill(b, d, fmt.Sprintf("old-run-%03d", r), benchRows(size/100))
	}
	d.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	d.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return openBench(b, path)
}

// benchRows shrinks a prefill under -short, where make test runs every benchmark once to keep it
// compiling and working; the figures come from full runs.
func benchRows(n int) int {
	if testing.Short() {
		return min(n, 100)
	}
	return n
}

// fill inserts n lines of runID in one transaction.
func fill(b *testing.B, d *sql.DB, runID string, n int) {
	b.Helper()
	tx, err := d.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := tx.Exec(db.EventInsert, runID, i, benchLine, "", 0, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPendingEvents drains 10,000 lines in batches of 256, reporting rows/s.
func BenchmarkPendingEvents(b *testing.B) {
	ctx := context.Background()
	const rows, batch = 10000, 256
	path := filepath.Join(b.TempDir(), "p.db")
	fill(b, baselineDB(b, path, "NORMAL"), "run", rows)
	b.Run("baseline", func(b *testing.B) {
		d := baselineDB(b, path, "NORMAL")
		for b.Loop() {
			after, n := int64(0), 0
			for {
				r, err := d.QueryContext(ctx, db.EventsPending, "run", after, batch)
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				for r.Next() {
					var l outbox.EventLine
					var mark int64
					if err := r.Scan(&l.Seq, &l.Line, &mark); err != nil {
						b.Fatal(err)
					}
					after = l.Seq
					got++
				}
				r.Close()
				if got == 0 {
					break
				}
				n += got
			}
			if n != rows {
				b.Fatalf("drained %d", n)
			}
		}
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("outbox", func(b *testing.B) {
		s := openBench(b, path)
		for b.Loop() {
			after, n := int64(0), 0
			for {
				lines, err := s.PendingEvents(ctx, "run", after, batch)
				if err != nil {
					b.Fatal(err)
				}
				if len(lines) == 0 {
					break
				}
				after = lines[len(lines)-1].Seq
				n += len(lines)
			}
			if n != rows {
				b.Fatalf("drained %d", n)
			}
		}
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// BenchmarkEnqueueGrowth enqueues into a table that already holds 10k or 1M rows of 100 earlier runs,
// at FULL: the cost must stay O(log n).
func BenchmarkEnqueueGrowth(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", size), func(b *testing.B) {
			s := prefilledStore(b, size)
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.EnqueueEvent(ctx, "run", benchBuild); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSchemaLayout is the measurement behind WITHOUT ROWID in migrations/00001: the enqueue
// statements and a pending drain against both layouts, at NORMAL so that the fsync does not hide the
// difference, with 1M rows already in the table. It reports the file size per row too.
func BenchmarkSchemaLayout(b *testing.B) {
	ctx := context.Background()
	for _, layout := range []string{"rowid", "without_rowid"} {
		b.Run(layout, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "l.db")
			d, err := driver.Open("file:"+path+"?_txlock=immediate", func(c *sqlite3.Conn) error {
				return c.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
			})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			d.SetMaxOpenConns(1)
			ddl := `CREATE TABLE events_outbox (engine_run_id TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL,
				once_key TEXT NOT NULL DEFAULT '', announce_key TEXT NOT NULL DEFAULT '',
				enqueued_at INTEGER NOT NULL DEFAULT 0, spill INTEGER NOT NULL DEFAULT 0, counted INTEGER NOT NULL DEFAULT 0,
				PRIMARY KEY (engine_run_id, seq))`
			if layout == "without_rowid" {
				ddl += " WITHOUT ROWID"
			}
			// The next-seq query also reads the progress table (migrations/00003) and the runs'
			// figures (migrations/00010), empty here as in a book whose runs were never folded.
			progress := `CREATE TABLE outbox_progress (engine_run_id TEXT NOT NULL PRIMARY KEY,
				projected INTEGER NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID`
			runs := `CREATE TABLE outbox_runs (engine_run_id TEXT NOT NULL PRIMARY KEY,
				last_seq INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID`
			if _, err := d.Exec(ddl + "; " + progress + "; " + runs); err != nil {
				b.Fatal(err)
			}
			for r := 0; r < 100; r++ {
				fill(b, d, fmt.Sprintf("old-run-%03d", r), benchRows(10_000))
			}
			b.ResetTimer()
			for b.Loop() {
				if err := baselineEnqueue(ctx, d, "run"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			var pages, pageSize, rows int64
			d.QueryRow("PRAGMA page_count").Scan(&pages)
			d.QueryRow("PRAGMA page_size").Scan(&pageSize)
			d.QueryRow("SELECT count(*) FROM events_outbox").Scan(&rows)
			b.ReportMetric(float64(pages*pageSize)/float64(rows), "file-bytes/row")
		})
	}
}
