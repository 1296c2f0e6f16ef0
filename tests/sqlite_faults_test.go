package tests

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ncruces/go-sqlite3/vfs"

	"github.com/textmachine/outbox/internal/faultvfs"
	"github.com/textmachine/outbox/outbox"
)

var vfsSeq atomic.Int64

// faultStore opens a fresh store through a new fault-injecting VFS set up by arm.
func faultStore(t *testing.T, arm func(*faultvfs.VFS)) (*outbox.Store, *faultvfs.VFS, string) {
	t.Helper()
	v := faultvfs.New()
	arm(v)
	name := fmt.Sprintf("fault-%d", vfsSeq.Add(1))
	vfs.Register(name, v)
	t.Cleanup(func() { vfs.Unregister(name) })
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path, outbox.WithVFS(name))
	if err != nil {
		t.Fatalf("open through %s: %v", name, err)
	}
	if err := s.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (seq INTEGER PRIMARY KEY, cents INTEGER NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s, v, path
}

// workload enqueues events of three kinds until one fails, and returns the lines acknowledged.
func workload(s *outbox.Store, n int) map[int64][]byte {
	ctx := context.Background()
	acked := map[int64][]byte{}
	for i := 1; i <= n; i++ {
		var seq int64
		var err error
		var line []byte
		build := func(kind string) outbox.EventBuilder {
			return func(seq int64) ([]byte, error) {
				line = fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"kind":%q}`, seq, kind)
				return line, nil
			}
		}
		switch i % 3 {
		case 0:
			seq, err = s.EnqueueEvent(ctx, "r", build("event"))
		case 1:
			_, seq, err = s.EnqueueOnce(ctx, "r", fmt.Sprintf("unit:%d", i), build("once"))
		default:
			err = s.WriteTx(ctx, func(tx *sql.Tx) error {
				var err error
				if seq, err = s.EnqueueTx(ctx, tx, "r", build("spend")); err != nil {
					return err
				}
				_, err = tx.Exec(`INSERT INTO spend (seq, cents) VALUES (?, 100)`, seq)
				return err
			})
		}
		if err != nil {
			return acked
		}
		acked[seq] = line
	}
	return acked
}

// countCalls runs the workload once without a fault and returns how many writes and syncs the store's
// own setup made, and how many there were in all: the calls to inject a fault at.
func countCalls(t *testing.T, n int) (setup, total int) {
	t.Helper()
	s, v, _ := faultStore(t, func(*faultvfs.VFS) {})
	setup = v.Calls()
	workload(s, n)
	total = v.Calls()
	s.Close()
	return setup, total
}

// checkDurable reopens the database through the ordinary VFS and checks that it is intact, that every
// acknowledged line is there with its bytes, that seqs are dense, and that every spend row has its
// event and every spend event its row.
func checkDurable(t *testing.T, label, path string, acked map[int64][]byte) {
	t.Helper()
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	defer s.Close()
	d := rawDB(t, path)
	var integrity string
	if err := d.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Fatalf("%s: integrity_check: %q %v", label, integrity, err)
	}
	stored := allLines(t, s, "r")
	for i, l := range stored {
		if l.Seq != int64(i+1) {
			t.Fatalf("%s: stored seqs are not dense: %v", label, seqsOf(stored))
		}
	}
	byseq := map[int64][]byte{}
	for _, l := range stored {
		byseq[l.Seq] = l.Line
	}
	for seq, line := range acked {
		if !bytes.Equal(byseq[seq], line) {
			t.Errorf("%s: acknowledged seq %d is %q after the fault, was %q", label, seq, byseq[seq], line)
		}
	}
	var events, rows int
	for _, l := range stored {
		if bytes.Contains(l.Line, []byte(`"spend"`)) {
			events++
		}
	}
	d.QueryRow(`SELECT count(*) FROM spend`).Scan(&rows)
	if events != rows {
		t.Errorf("%s: %d spend events but %d spend rows: a caller's transaction was split", label, events, rows)
	}
}

// TestPowerLossOfTheDatabaseAtEveryStepKeepsEveryAcknowledgedEvent cuts the power at every write and
// every sync SQLite makes during a workload, leaves the files as the last sync left them, and reopens.
func TestPowerLossOfTheDatabaseAtEveryStepKeepsEveryAcknowledgedEvent(t *testing.T) {
	t.Parallel()
	const n = 12
	setup, total := countCalls(t, n)
	cuts := 0
	for cut := setup + 1; cut <= total; cut++ {
		s, v, path := faultStore(t, func(v *faultvfs.VFS) { v.Cut = cut })
		acked := workload(s, n)
		s.Close()
		if !v.Off() {
			t.Fatalf("cut %d: the power never went", cut)
		}
		if err := v.Crash(); err != nil {
			t.Fatal(err)
		}
		checkDurable(t, fmt.Sprintf("cut %d (of %d)", cut, total), path, acked)
		cuts++
	}
	t.Logf("%d power cuts, one at each write and sync of the workload", cuts)
}

// TestAnSQLiteIOErrorAtEveryCallFailsOnlyItsCall fails one write or sync with an I/O error, at every
// call of a workload: the calls around it succeed, and nothing acknowledged is lost.
func TestAnSQLiteIOErrorAtEveryCallFailsOnlyItsCall(t *testing.T) {
	t.Parallel()
	const n = 12
	setup, total := countCalls(t, n)
	for at := setup + 1; at <= total; at++ {
		s, _, path := faultStore(t, func(v *faultvfs.VFS) { v.FailAt = at })
		acked := workload(s, n)
		// The workload stopped at the failed call; the store goes on.
		more := workload(s, 3)
		for seq, line := range more {
			acked[seq] = line
		}
		if len(more) != 3 {
			t.Errorf("I/O error at call %d: the store did not recover (%d of 3 calls after it succeeded)", at, len(more))
		}
		s.Close()
		checkDurable(t, fmt.Sprintf("I/O error at call %d", at), path, acked)
	}
}
