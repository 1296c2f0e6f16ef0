// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/db"
)

// BenchmarkRecordProjected times the relay's record of a batch (recordProjected: the run's progress
// moves, its stop goes; no once keys) beside a hand-written transaction of the same two statements,
// prepared, through database/sql on a connection of its own at the same durability (WAL,
// synchronous=NORMAL, no sync of its own). The two alternate record by record on the same book, so
// that the disk and the neighbours fall on both alike; the ratio is the hand-written time over the
// record's. The record sits between two appends of a relay (see Relay.project), so its cost is the
// relay's distance to bare appends (BenchmarkRelayDrain in journal/).
func BenchmarkRecordProjected(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "book.db")
	s, err := Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw, err := sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	setProgress, err := raw.PrepareContext(ctx, db.ProgressSet)
	if err != nil {
		b.Fatal(err)
	}
	clearStop, err := raw.PrepareContext(ctx, db.StopClear)
	if err != nil {
		b.Fatal(err)
	}
	byHand := func(last int64) {
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.StmtContext(ctx, setProgress).ExecContext(ctx, "hand", last); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.StmtContext(ctx, clearStop).ExecContext(ctx, "hand"); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	var inHand, inRecord time.Duration
	for i := int64(1); b.Loop(); i++ {
		t0 := time.Now()
		byHand(i)
		t1 := time.Now()
		if err := s.recordProjected(ctx, "run", i, nil, false, 1); err != nil {
			b.Fatal(err)
		}
		inHand, inRecord = inHand+t1.Sub(t0), inRecord+time.Since(t1)
	}
	b.ReportMetric(float64(inRecord.Microseconds())/float64(b.N), "record-µs")
	b.ReportMetric(float64(inHand.Microseconds())/float64(b.N), "by-hand-µs")
	b.ReportMetric(inHand.Seconds()/inRecord.Seconds(), "ratio")
}
