// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestPowerLossOfTheDatabaseAtEveryStepKeepsEveryAcknowledgedEvent cuts the power at every write and
// every sync SQLite makes during a workload, leaves the files as the last sync left them, and reopens.
func TestPowerLossOfTheDatabaseAtEveryStepKeepsEveryAcknowledgedEvent(t *testing.T) {
	t.Parallel()
	const n = 12
	setup, total := outboxtest.CountCalls(t, n)
	cuts := 0
	for cut := setup + 1; cut <= total; cut++ {
		s, v, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.Cut = cut })
		acked, _ := outboxtest.Workload(s, n)
		s.Close()
		if !v.Off() {
			t.Fatalf("cut %d: the power never went", cut)
		}
		if err := v.Crash(); err != nil {
			t.Fatal(err)
		}
		outboxtest.CheckDurable(t, fmt.Sprintf("cut %d (of %d)", cut, total), path, acked)
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
	setup, total := outboxtest.CountCalls(t, n)
	syncFaults := 0
	for at := setup + 1; at <= total; at++ {
		label := fmt.Sprintf("I/O error at call %d", at)
		s, _, path, name := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.FailAt = at })
		acked, err := outboxtest.Workload(s, n)
		// The workload stopped at the failed call; the store goes on.
		more, err2 := outboxtest.Workload(s, 3)
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
			more, _ = outboxtest.Workload(s, 3)
		}
		for seq, line := range more {
			acked[seq] = line
		}
		if len(more) != 3 {
			t.Errorf("%s: the store did not recover (%d of 3 calls after it succeeded)", label, len(more))
		}
		s.Close()
		outboxtest.CheckDurable(t, label, path, acked)
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
			v, name := outboxtest.NewFaultVFS(t, func(*faultvfs.VFS) {})
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
	_, name := outboxtest.NewFaultVFS(t, func(v *faultvfs.VFS) {
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
	relay := outboxtest.FastRelay(t, s, sink, "r")
	go func() { flushed <- relay.Flush(ctx) }()
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

// largeWorkload enqueues, from one producer of 1 MiB lines (run "big") and three producers of small
// ones (run "small") side by side, the calls the group committer reorders: small calls go before the
// next large line, and are made durable before it is written. It returns the lines acknowledged, by
// run and seq.
func largeWorkload(s *outbox.Store) map[string]map[int64][]byte {
	ctx := context.Background()
	var mu sync.Mutex
	acked := map[string]map[int64][]byte{"big": {}, "small": {}}
	produce := func(run string, size, calls int) {
		for range calls {
			var line []byte
			seq, err := s.EnqueueEvent(ctx, run, func(seq int64) ([]byte, error) {
				line = fmt.Appendf(nil, `{"run":%q,"seq":%d,"pad":"`, run, seq)
				line = append(line, bytes.Repeat([]byte("x"), max(size-len(line)-2, 0))...)
				line = append(line, `"}`...)
				return line, nil
			})
			if err != nil {
				return
			}
			mu.Lock()
			acked[run][seq] = line
			mu.Unlock()
		}
	}
	produce("big", 1<<20, 1) // the run is known for large lines from here on
	var wg sync.WaitGroup
	wg.Go(func() { produce("big", 1<<20, 2) })
	for range 3 {
		wg.Go(func() { produce("small", 200, 4) })
	}
	wg.Wait()
	return acked
}

// TestPowerLossBesideALargeProducerKeepsEveryAcknowledgedEvent cuts the power during largeWorkload,
// at writes and syncs spread over the whole workload (every one would take minutes: a 1 MiB line is
// some three hundred writes), and checks that every call acknowledged survives with its bytes.
func TestPowerLossBesideALargeProducerKeepsEveryAcknowledgedEvent(t *testing.T) {
	t.Parallel()
	s, v, _, _ := outboxtest.FaultStore(t, func(*faultvfs.VFS) {})
	setup := v.Calls()
	largeWorkload(s)
	total := v.Calls()
	s.Close()
	step := max(1, (total-setup)/60)
	cuts := 0
	for cut := setup + 1; cut <= total; cut += step {
		s, v, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.Cut = cut })
		acked := largeWorkload(s)
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
		for run, lines := range acked {
			stored := map[int64][]byte{}
			for _, l := range outboxtest.AllLines(t, after, run) {
				stored[l.Seq] = l.Line
			}
			for seq, line := range lines {
				if !bytes.Equal(stored[seq], line) {
					t.Errorf("%s: acknowledged line %d of run %q is lost or changed (%d bytes stored, %d acknowledged)", label, seq, run, len(stored[seq]), len(line))
				}
			}
		}
		after.Close()
		cuts++
	}
	if cuts < 10 {
		t.Errorf("only %d power cuts landed", cuts)
	}
	t.Logf("%d power cuts over %d writes and syncs", cuts, total-setup)
}
