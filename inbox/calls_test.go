// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ncruces/go-sqlite3/vfs"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/faultvfs"
)

var vfsSeq atomic.Int64

// syncCounter registers a VFS that counts the syncs of the database's files.
func syncCounter(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	v := faultvfs.New()
	var n atomic.Int64
	v.BeforeSync = func(string) { n.Add(1) }
	name := fmt.Sprintf("inbox-count-%d-%d", os.Getpid(), vfsSeq.Add(1))
	vfs.Register(name, v)
	return name, &n
}

func TestOneCallIsOneTransactionAndOneFsync(t *testing.T) {
	t.Parallel()
	name, syncs := syncCounter(t)
	in, _ := setup(t, inbox.WithVFS(name))
	mustApply(t, in, lines("warm", 1, 1))
	next := int64(1)
	for _, n := range []int{1, 10, 500} {
		before := syncs.Load()
		rep := mustApply(t, in, append(lines("r", next, next+int64(n)-1), lines("s", next, next+int64(n)-1)...))
		next += int64(n)
		if got := syncs.Load() - before; got != 1 {
			t.Errorf("a call of %d lines synced %d times, want 1", 2*n, got)
		}
		if rep.Applied != 2*n {
			t.Errorf("%+v", rep)
		}
	}
	// A call that changes nothing (only duplicates) commits nothing to sync.
	before := syncs.Load()
	mustApply(t, in, lines("r", 1, 100))
	if got := syncs.Load() - before; got > 1 {
		t.Errorf("a call of duplicates synced %d times", got)
	}
}

func TestACancelledContextCostsItsCallAlone(t *testing.T) {
	t.Parallel()
	call := append(lines("r", 1, 5), lines("s", 1, 5)...)
	// Each case cancels at another moment; nothing of the call may be stored, and the same call
	// afterwards applies everything.
	for name, during := range map[string]func(cancel func()) inbox.Handler{
		"before the call": nil,
		"in the first handler": func(cancel func()) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				cancel()
				return insertHandler(ctx, tx, ev)
			}
		},
		"in a handler, which ignores it": func(cancel func()) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				if ev.RunID == "s" && ev.Seq == 3 {
					cancel()
				}
				insertHandler(context.WithoutCancel(ctx), tx, ev)
				return nil
			}
		},
		"after the last handler": func(cancel func()) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				err := insertHandler(ctx, tx, ev)
				if ev.RunID == "s" && ev.Seq == 5 {
					cancel()
				}
				return err
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, path := setup(t)
			ctx, cancel := context.WithCancel(context.Background())
			h := insertHandler
			if during == nil {
				cancel()
			} else {
				h = during(cancel)
			}
			rep, err := in.Apply(ctx, call, h)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Apply: %v, want context.Canceled", err)
			}
			if rep != (inbox.Report{}) {
				t.Errorf("report %+v beside an error", rep)
			}
			if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
				t.Errorf("%d rows stored by a cancelled call", n)
			}
			if rep := mustApply(t, in, call); rep.Applied != 10 {
				t.Errorf("the next call: %+v", rep)
			}
		})
	}
}

func TestACancelledWaitForTheWriterCostsThatCallAlone(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := in.Apply(context.Background(), lines("a", 1, 1), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			close(inside)
			<-release
			return insertHandler(ctx, tx, ev)
		})
		done <- err
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan error)
	go func() {
		_, err := in.Apply(ctx, lines("b", 1, 1), insertHandler)
		waiting <- err
	}()
	cancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Errorf("the waiting call: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 1 {
		t.Errorf("%d rows, want the first call's", n)
	}
}

func TestPositionAndQuarantinedReadBesideARunningApply(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 1), line("q", 3)})
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := in.Apply(context.Background(), lines("r", 2, 2), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			if err := insertHandler(ctx, tx, ev); err != nil {
				return err
			}
			close(inside)
			<-release // holds the write transaction open, with its write made
			return nil
		})
		done <- err
	}()
	<-inside
	// These must return while the writer is held: were they to wait for it, the test would hang.
	if p := position(t, in, "r"); p != 1 {
		t.Errorf("position %d beside the running Apply, want the committed 1", p)
	}
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].RunID != "q" {
		t.Errorf("quarantined %v", qs)
	}
	if _, err := in.SourcePosition(context.Background(), "file:/x"); err != nil {
		t.Error(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != 2 {
		t.Errorf("position %d after the commit", p)
	}
}

func TestConcurrentApplyCallsAreSerialized(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	var active, most atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		return insertHandler(ctx, tx, ev)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every goroutine delivers the same run's lines in overlapping batches.
			for b := int64(0); b < 10; b++ {
				if _, err := in.Apply(context.Background(), lines("r", b*5+1, b*5+5+int64(g%3)), h); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d handlers ran at once", m)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != int(position(t, in, "r")) {
		t.Errorf("%d rows for position %d", n, position(t, in, "r"))
	}
}

func TestConcurrentCallsApplyEachLineOnce(t *testing.T) {
	in, path := setup(t, inbox.WithDigestWindow(1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := inbox.Report{}
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := int64(1); s <= 40; s += 4 {
				rep, err := in.Apply(context.Background(), lines("r", s, s+3), insertHandler)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total.Applied += rep.Applied
				total.Duplicates += rep.Duplicates
				total.Stale += rep.Stale
				total.Quarantined += rep.Quarantined
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if total.Applied != 40 || total.Quarantined != 0 {
		t.Fatalf("%+v", total)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 40 {
		t.Fatalf("%d", n)
	}
}
