// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// BenchmarkApply measures Apply in batches, with a handler inserting one row per line, beside a
// hand-written loop doing the same work: journal.LineKey on each line, the same insert, the run's
// high-water mark and the line's digest updated, one transaction per batch, at the same durability
// (synchronous=FULL in WAL mode, one sync per batch). The ratio of the two is the inbox's overhead.
func BenchmarkApply(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d/inbox", batch), func(b *testing.B) {
			in, _ := setup(b)
			ctx := context.Background()
			benchBatches(b, batch, func(ls [][]byte) {
				rep, err := in.Apply(ctx, ls, insertHandler)
				if err != nil || rep.Applied != len(ls) {
					b.Fatal(rep, err)
				}
			})
		})
		b.Run(fmt.Sprintf("batch=%d/handwritten", batch), func(b *testing.B) {
			h := newHandwritten(b)
			benchBatches(b, batch, func(ls [][]byte) {
				if n := h.apply(b, ls); n != len(ls) {
					b.Fatalf("applied %d of %d", n, len(ls))
				}
			})
		})
		b.Run(fmt.Sprintf("batch=%d/ratio", batch), func(b *testing.B) { benchRatio(b, batch) })
	}
}

// benchRatio applies each batch with the inbox and with the hand-written loop back to back, each
// first in turn, so that both see the same disk: its speed drifts by a factor of several within a
// minute on these shared machines, which in separate benchmarks moves the ratio of their medians more
// than the difference measured. The ratio is the inbox's rate over the loop's (1 is parity).
func benchRatio(b *testing.B, batch int) {
	in, _ := setup(b)
	h := newHandwritten(b)
	ctx := context.Background()
	var inInbox, inHand time.Duration
	viaInbox := func(ls [][]byte) {
		t0 := time.Now()
		if rep, err := in.Apply(ctx, ls, insertHandler); err != nil || rep.Applied != len(ls) {
			b.Fatal(rep, err)
		}
		inInbox += time.Since(t0)
	}
	viaHand := func(ls [][]byte) {
		t0 := time.Now()
		if n := h.apply(b, ls); n != len(ls) {
			b.Fatalf("applied %d of %d", n, len(ls))
		}
		inHand += time.Since(t0)
	}
	next := int64(1)
	i := 0
	for b.Loop() {
		ls := make([][]byte, batch)
		for j := range ls {
			ls[j] = line("r", next, "a unit of work of about a hundred bytes, as an engine's spend event carries")
			next++
		}
		if i++; i%2 == 0 {
			viaInbox(ls)
			viaHand(ls)
		} else {
			viaHand(ls)
			viaInbox(ls)
		}
	}
	lines := float64(b.N * batch)
	b.ReportMetric(lines/inInbox.Seconds(), "inbox-lines/s")
	b.ReportMetric(lines/inHand.Seconds(), "handwritten-lines/s")
	b.ReportMetric(inHand.Seconds()/inInbox.Seconds(), "ratio")
}

// benchBatches renders b.N lines of one run, of about 150 bytes, and applies them batch by batch.
func benchBatches(b *testing.B, batch int, apply func([][]byte)) {
	ls := make([][]byte, b.N)
	for i := range ls {
		ls[i] = line("r", int64(i)+1, "a unit of work of about a hundred bytes, as an engine's spend event carries")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < len(ls); i += batch {
		apply(ls[i:min(i+batch, len(ls))])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// handwritten is what a careful engineer writes without the inbox.
type handwritten struct {
	db     *sql.DB
	getHWM *sql.Stmt
	setHWM *sql.Stmt
}

func newHandwritten(b *testing.B) *handwritten {
	path := filepath.Join(b.TempDir(), "hand.db")
	d, err := driver.Open("file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_pragma=synchronous(full)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	d.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`,
		`CREATE TABLE runs (run TEXT PRIMARY KEY, hwm INTEGER NOT NULL, digest BLOB NOT NULL) WITHOUT ROWID`,
	} {
		if _, err := d.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	h := &handwritten{db: d}
	if h.getHWM, err = d.Prepare(`SELECT hwm FROM runs WHERE run = ?`); err != nil {
		b.Fatal(err)
	}
	if h.setHWM, err = d.Prepare(`INSERT INTO runs (run, hwm, digest) VALUES (?, ?, ?)
		ON CONFLICT (run) DO UPDATE SET hwm = excluded.hwm, digest = excluded.digest`); err != nil {
		b.Fatal(err)
	}
	return h
}

func (h *handwritten) apply(b *testing.B, ls [][]byte) int {
	ctx := context.Background()
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	get, set := tx.StmtContext(ctx, h.getHWM), tx.StmtContext(ctx, h.setHWM)
	hwms := map[string]int64{}
	applied := 0
	for _, l := range ls {
		run, seq, err := journal.LineKey(l)
		if err != nil {
			b.Fatal(err)
		}
		hwm, ok := hwms[run]
		if !ok {
			if err := get.QueryRowContext(ctx, run).Scan(&hwm); err != nil && err != sql.ErrNoRows {
				b.Fatal(err)
			}
		}
		if seq != hwm+1 {
			continue
		}
		if err := insertHandler(ctx, tx, inbox.Event{RunID: run, Seq: seq, Line: append([]byte(nil), l...)}); err != nil {
			b.Fatal(err)
		}
		d := sha256.Sum256(l)
		if _, err := set.ExecContext(ctx, run, seq, d[:]); err != nil {
			b.Fatal(err)
		}
		hwms[run] = seq
		applied++
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return applied
}
