package tests

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ncruces/go-sqlite3/vfs"

	"github.com/textmachine/outbox/internal/faultvfs"
	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

var vfsSeq atomic.Int64

// newFaultVFS registers a fresh fault-injecting VFS, set up by arm, for the test's life.
func newFaultVFS(t *testing.T, arm func(*faultvfs.VFS)) (v *faultvfs.VFS, name string) {
	t.Helper()
	name = fmt.Sprintf("fault-%d", vfsSeq.Add(1))
	v = faultvfs.New()
	arm(v)
	vfs.Register(name, v)
	t.Cleanup(func() { vfs.Unregister(name) })
	return v, name
}

// faultStore opens a fresh store through a new fault-injecting VFS set up by arm.
func faultStore(t *testing.T, arm func(*faultvfs.VFS)) (s *outbox.Store, v *faultvfs.VFS, path, name string) {
	t.Helper()
	v, name = newFaultVFS(t, arm)
	path = filepath.Join(t.TempDir(), "book.db")
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
	return s, v, path, name
}

// workload enqueues events of three kinds until one fails, and returns the lines acknowledged and the
// error that stopped it.
func workload(s *outbox.Store, n int) (map[int64][]byte, error) {
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
			return acked, err
		}
		acked[seq] = line
	}
	return acked, nil
}

// countCalls runs the workload once without a fault and returns how many writes and syncs the store's
// own setup made, and how many there were in all: the calls to inject a fault at.
func countCalls(t *testing.T, n int) (setup, total int) {
	t.Helper()
	s, v, _, _ := faultStore(t, func(*faultvfs.VFS) {})
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
	d := outboxtest.RawDB(t, path)
	var integrity string
	if err := d.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Fatalf("%s: integrity_check: %q %v", label, integrity, err)
	}
	stored := outboxtest.AllLines(t, s, "r")
	for i, l := range stored {
		if l.Seq != int64(i+1) {
			t.Fatalf("%s: stored seqs are not dense: %v", label, outboxtest.SeqsOf(stored))
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
		s, v, path, _ := faultStore(t, func(v *faultvfs.VFS) { v.Cut = cut })
		acked, _ := workload(s, n)
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
// call of a workload: the calls around it succeed, and nothing acknowledged is lost. A failed sync of
// the WAL is the one fault the store does not ride over, since after it the kernel may have dropped
// what the sync was to write: the calls it covered fail with ErrNotDurable (committed, durability
// unknown), every write after it with ErrSyncFailed, and the store works again once reopened.
func TestAnSQLiteIOErrorAtEveryCallFailsOnlyItsCall(t *testing.T) {
	t.Parallel()
	const n = 12
	setup, total := countCalls(t, n)
	syncFaults := 0
	for at := setup + 1; at <= total; at++ {
		label := fmt.Sprintf("I/O error at call %d", at)
		s, _, path, name := faultStore(t, func(v *faultvfs.VFS) { v.FailAt = at })
		acked, err := workload(s, n)
		// The workload stopped at the failed call; the store goes on.
		more, err2 := workload(s, 3)
		if errors.Is(err, outbox.ErrNotDurable) {
			syncFaults++
			if !errors.Is(err2, outbox.ErrSyncFailed) || errors.Is(err2, outbox.ErrNotDurable) {
				t.Errorf("%s: a write after a failed WAL sync returned %v, want ErrSyncFailed", label, err2)
			}
			s.Close()
			var oerr error
			if s, oerr = outbox.Open(context.Background(), path, outbox.WithVFS(name)); oerr != nil {
				t.Fatalf("%s: reopen: %v", label, oerr)
			}
			more, _ = workload(s, 3)
		}
		for seq, line := range more {
			acked[seq] = line
		}
		if len(more) != 3 {
			t.Errorf("%s: the store did not recover (%d of 3 calls after it succeeded)", label, len(more))
		}
		s.Close()
		checkDurable(t, label, path, acked)
	}
	if syncFaults == 0 {
		t.Error("no fault hit a WAL sync of the store's own")
	}
}

// TestDurabilityIsFullByDefaultAndNormalOnlyWhenAsked cuts the power the moment a call returns: at the
// default durability its event survives; at DurabilityNormal it is lost, as documented.
func TestDurabilityIsFullByDefaultAndNormalOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opts     []outbox.Option
		survives bool
	}{
		{"default", nil, true},
		{"normal", []outbox.Option{outbox.WithDurability(outbox.DurabilityNormal)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, name := newFaultVFS(t, func(*faultvfs.VFS) {})
			path := filepath.Join(t.TempDir(), "book.db")
			opts := append([]outbox.Option{outbox.WithVFS(name)}, tc.opts...)
			s, err := outbox.Open(ctx, path, opts...)
			if err != nil {
				t.Fatal(err)
			}
			outboxtest.MustEnqueue(t, s, "r")
			// A clean close checkpoints and syncs: seq 1 is on the disk whatever the level.
			s.Close()
			if s, err = outbox.Open(ctx, path, opts...); err != nil {
				t.Fatal(err)
			}
			if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("event")); err != nil || seq != 2 {
				t.Fatalf("EnqueueEvent = (%d, %v)", seq, err)
			}
			v.PowerOff()
			s.Close()
			if err := v.Crash(); err != nil {
				t.Fatal(err)
			}
			s2, err := outbox.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			got := outboxtest.SeqsOf(outboxtest.AllLines(t, s2, "r"))
			want := []int64{1}
			if tc.survives {
				want = []int64{1, 2}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("seqs after a power cut right after seq 2 returned (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRelayProjectsOnlyDurableLines holds the WAL sync that follows a commit. The committed line is
// visible to readers by then, but the relay must not hand it to the sink before it is durable: lost to
// power failure, it would come back under its number with other bytes.
func TestRelayProjectsOnlyDurableLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	_, name := newFaultVFS(t, func(v *faultvfs.VFS) {
		v.BeforeSync = func(file string) {
			if strings.HasSuffix(file, "-wal") && armed.CompareAndSwap(true, false) {
				close(held)
				<-release
			}
		}
	})
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(ctx, path, outbox.WithVFS(name))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	armed.Store(true)
	enqueued := make(chan error, 1)
	go func() {
		_, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("event"))
		enqueued <- err
	}()
	<-held
	var visible int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_outbox`).Scan(&visible); err != nil || visible != 1 {
		t.Fatalf("committed rows visible while the sync is held: %d, %v", visible, err)
	}
	sink := outboxtest.NewMemSink()
	flushed := make(chan error, 1)
	go func() { flushed <- outboxtest.FastRelay(s, sink, "r").Flush(ctx) }()
	flushErr, early := error(nil), false
	select {
	case flushErr = <-flushed:
		early = true
		t.Errorf("Flush returned (%v) while its line's sync was held", flushErr)
	case <-time.After(200 * time.Millisecond):
	}
	if n := len(sink.All()); n != 0 {
		t.Errorf("the sink got %d lines before they were durable", n)
	}
	select {
	case err := <-enqueued:
		t.Errorf("EnqueueEvent returned (%v) before its commit was synced", err)
	default:
	}
	close(release)
	if err := <-enqueued; err != nil {
		t.Fatal(err)
	}
	if !early {
		flushErr = <-flushed
	}
	if flushErr != nil {
		t.Fatal(flushErr)
	}
	if n := len(sink.All()); n != 1 {
		t.Errorf("the sink has %d lines after the sync, want 1", n)
	}
}
