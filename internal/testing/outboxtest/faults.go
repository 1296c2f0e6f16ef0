// SPDX-License-Identifier: Apache-2.0

package outboxtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3/vfs"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/outbox"
)

var vfsSeq atomic.Int64

// NewFaultVFS registers a fresh fault-injecting VFS, set up by arm, under a name of its own, until
// the test ends.
func NewFaultVFS(t testing.TB, arm func(*faultvfs.VFS)) (v *faultvfs.VFS, name string) {
	t.Helper()
	name = fmt.Sprintf("fault-%d", vfsSeq.Add(1))
	v = faultvfs.New()
	arm(v)
	vfs.Register(name, v)
	t.Cleanup(func() { vfs.Unregister(name) })
	return v, name
}

// FaultStore opens a fresh store through a new fault-injecting VFS set up by arm, with a table spend
// of its own beside the outbox's, and returns the store, the VFS, the path and the VFS's name.
func FaultStore(t testing.TB, arm func(*faultvfs.VFS)) (s *outbox.Store, v *faultvfs.VFS, path, name string) {
	t.Helper()
	v, name = NewFaultVFS(t, arm)
	path = filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(Patient(t), path, outbox.WithVFS(name))
	if err != nil {
		t.Fatalf("open through %s: %v", name, err)
	}
	if err := s.WriteTx(Patient(t), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (seq INTEGER PRIMARY KEY, cents INTEGER NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s, v, path, name
}

// Workload enqueues events of three kinds until one fails, and returns the lines acknowledged and the
// error that stopped it. Its calls have a deadline far off, which the store's operation timeout does
// not shorten: on a loaded machine a call that outlived that timeout would end with the context's
// error, not with the fault under test.
func Workload(s *outbox.Store, n int) (map[int64][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
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
			return acked, err
		}
		acked[seq] = line
	}
	return acked, nil
}

// CountCalls runs the Workload once without a fault and returns how many writes and syncs the store's
// own setup made, and how many there were in all: the calls to inject a fault at.
func CountCalls(t testing.TB, n int) (setup, total int) {
	t.Helper()
	s, v, _, _ := FaultStore(t, func(*faultvfs.VFS) {})
	setup = v.Calls()
	Workload(s, n)
	total = v.Calls()
	s.Close()
	return setup, total
}

// CheckDurable reopens the database through the ordinary VFS and checks that it is intact, that every
// acknowledged line is there with its bytes, that seqs are dense, and that every spend row has its
// event and every spend event its row.
func CheckDurable(t testing.TB, label, path string, acked map[int64][]byte) {
	t.Helper()
	s, err := outbox.Open(Patient(t), path)
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	defer s.Close()
	d := RawDB(t, path)
	var integrity string
	if err := d.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Fatalf("%s: integrity_check: %q %v", label, integrity, err)
	}
	stored := AllLines(t, s, "r")
	for i, l := range stored {
		if l.Seq != int64(i+1) {
			t.Fatalf("%s: stored seqs are not dense: %v", label, SeqsOf(stored))
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
