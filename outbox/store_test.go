// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

func TestEnqueueNumbersAreDensePerRunAndRunsAreIndependent(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	var a, b []int64
	for i := 0; i < 5; i++ {
		a = append(a, outboxtest.MustEnqueue(t, s, "run-a"))
		if i%2 == 0 {
			b = append(b, outboxtest.MustEnqueue(t, s, "run-b"))
		}
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 5), a); diff != "" {
		t.Errorf("run-a seqs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 3), b); diff != "" {
		t.Errorf("run-b seqs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 5), outboxtest.SeqsOf(outboxtest.AllLines(t, s, "run-a"))); diff != "" {
		t.Errorf("stored run-a seqs (-want +got):\n%s", diff)
	}
}

func TestBuilderErrorStoresNothingConsumesNoNumberAndReachesTheCaller(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	outboxtest.MustEnqueue(t, s, "r")
	var offered int64
	seq, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) {
		offered = seq
		return nil, outboxtest.ErrRender
	})
	if !errors.Is(err, outboxtest.ErrRender) || seq != 0 {
		t.Fatalf("EnqueueEvent = (%d, %v), want (0, outboxtest.ErrRender)", seq, err)
	}
	if offered != 2 {
		t.Errorf("builder was offered seq %d, want 2", offered)
	}
	if n := outboxtest.CountRows(t, path, "engine_run_id = 'r'"); n != 1 {
		t.Errorf("rows after failed build = %d, want 1", n)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 2 {
		t.Errorf("next success got seq %d, want 2 (the failed build's number)", got)
	}
	// The same through EnqueueOnce: the key must not reach the ledger or block a retry.
	ok, seq, err := s.EnqueueOnce(ctx, "r", "unit:1", func(int64) ([]byte, error) { return nil, outboxtest.ErrRender })
	if !errors.Is(err, outboxtest.ErrRender) || ok || seq != 0 {
		t.Fatalf("EnqueueOnce = (%v, %d, %v), want (false, 0, outboxtest.ErrRender)", ok, seq, err)
	}
	ok, seq, err = s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done"))
	if err != nil || !ok || seq != 3 {
		t.Fatalf("EnqueueOnce retry = (%v, %d, %v), want (true, 3, nil)", ok, seq, err)
	}
}

func TestNilLineDeclinesWithoutRowOrNumber(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t)
	seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.ConstLine(nil))
	if err != nil || seq != 0 {
		t.Fatalf("EnqueueEvent(nil line) = (%d, %v), want (0, nil)", seq, err)
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 0 {
		t.Errorf("rows = %d, want 0", n)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 1 {
		t.Errorf("first real event got seq %d, want 1", got)
	}
}

func TestBuilderPanicStoresNothingLeavesWriterFreeAndPropagates(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the builder's panic", r)
			}
		}()
		s.EnqueueEvent(context.Background(), "r", func(int64) ([]byte, error) { panic("boom") })
		t.Error("EnqueueEvent returned after its builder panicked")
	}()
	if n := outboxtest.CountRows(t, path, "1"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
	// The writer connection is free: the next enqueue neither blocks nor skips a number.
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 2 {
		t.Errorf("next seq = %d, want 2", got)
	}
	// A panic inside WriteTx after the caller's own write rolls that write back too.
	func() {
		defer func() { recover() }()
		s.WriteTx(context.Background(), func(tx *sql.Tx) error {
			if _, err := s.EnqueueTx(context.Background(), tx, "r", outboxtest.LineOf("x")); err != nil {
				t.Fatal(err)
			}
			panic("boom")
		})
	}()
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 3 {
		t.Errorf("seq after a panicking WriteTx = %d, want 3", got)
	}
}

func TestLinesComeBackByteIdentical(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	mib := bytes.Repeat([]byte("é\x00\r\xff"), 1<<18) // 1 MiB of NUL, CR, invalid UTF-8 and multi-byte runes
	cases := [][]byte{
		[]byte("plain"),
		{0},
		[]byte("nul\x00inside"),
		[]byte("\xff\xfe invalid utf-8 \xc3"),
		[]byte("carriage\rreturn\r"),
		[]byte(" "),
		mib,
	}
	for _, c := range cases {
		if _, err := s.EnqueueEvent(context.Background(), "r", outboxtest.ConstLine(c)); err != nil {
			t.Fatalf("EnqueueEvent(%.20q): %v", c, err)
		}
	}
	got := outboxtest.AllLines(t, s, "r")
	if len(got) != len(cases) {
		t.Fatalf("got %d lines, want %d", len(got), len(cases))
	}
	for i, c := range cases {
		if !bytes.Equal(got[i].Line, c) {
			t.Errorf("line %d: got %.40q, want %.40q", i+1, got[i].Line, c)
		}
	}
}

func TestEmptyOrNewlineLinesAreRefusedWithErrInvalidLine(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t)
	for _, bad := range [][]byte{{}, []byte("\n"), []byte("a\nb"), []byte("trailing\n")} {
		seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.ConstLine(bad))
		if !errors.Is(err, outbox.ErrInvalidLine) || seq != 0 {
			t.Errorf("EnqueueEvent(%q) = (%d, %v), want ErrInvalidLine", bad, seq, err)
		}
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 0 {
		t.Errorf("rows = %d, want 0", n)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 1 {
		t.Errorf("seq after refused lines = %d, want 1", got)
	}
}

func TestEnqueueOnceAnnouncesAKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("empty key", func(t *testing.T) {
		s, _ := outboxtest.Setup(t)
		_, _, err := s.EnqueueOnce(ctx, "r", "", outboxtest.LineOf("done"))
		if !errors.Is(err, outbox.ErrInvalidOnceKey) {
			t.Errorf("err = %v, want ErrInvalidOnceKey", err)
		}
	})
	t.Run("new key enqueues", func(t *testing.T) {
		s, _ := outboxtest.Setup(t)
		outboxtest.MustEnqueue(t, s, "r")
		ok, seq, err := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done"))
		if err != nil || !ok || seq != 2 {
			t.Errorf("EnqueueOnce = (%v, %d, %v), want (true, 2, nil)", ok, seq, err)
		}
	})
	t.Run("key in the ledger skips the builder", func(t *testing.T) {
		s, _ := outboxtest.Setup(t)
		_, seq, _ := s.EnqueueOnce(ctx, "old", "unit:1", outboxtest.LineOf("done"))
		if err := s.MarkAnnounced(ctx, "old", map[int64]string{seq: "unit:1"}); err != nil {
			t.Fatal(err)
		}
		called := false
		ok, seq, err := s.EnqueueOnce(ctx, "new", "unit:1", func(int64) ([]byte, error) {
			called = true
			return []byte("x"), nil
		})
		if err != nil || ok || seq != 0 || called {
			t.Errorf("EnqueueOnce = (%v, %d, %v), builder called %v; want (false, 0, nil), not called", ok, seq, err, called)
		}
		if used, _ := s.EventsUsed(ctx, "new"); used {
			t.Error("run \"new\" has a row")
		}
	})
	t.Run("declining builder", func(t *testing.T) {
		s, path := outboxtest.Setup(t)
		ok, seq, err := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.ConstLine(nil))
		if err != nil || ok || seq != 0 {
			t.Errorf("EnqueueOnce = (%v, %d, %v), want (false, 0, nil)", ok, seq, err)
		}
		if n := outboxtest.CountRows(t, path, "1"); n != 0 {
			t.Errorf("rows = %d, want 0", n)
		}
	})
}

func TestMarkAnnouncedWritesTheWholeBatchOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 4; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: "k1", 2: "k2"}); err != nil {
		t.Fatal(err)
	}
	// Re-marking a seq with the key it holds is a no-op.
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: "k1", 2: "k2"}); err != nil {
		t.Errorf("re-mark: %v", err)
	}
	ledger := func() map[string]bool {
		got, err := s.AnnouncedOnceKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := map[string]bool{"k1": true, "k2": true}
	for name, batch := range map[string]map[int64]string{
		"key held by another row": {3: "k3", 4: "k1"},
		"seq without a row":       {3: "k3", 99: "k99"},
		"seq holding another key": {3: "k3", 1: "other"},
		"one key twice in batch":  {3: "dup", 4: "dup"},
		"empty key":               {3: "k3", 4: ""},
	} {
		err := s.MarkAnnounced(ctx, "r", batch)
		if err == nil {
			t.Errorf("%s: MarkAnnounced succeeded", name)
		}
		if diff := cmp.Diff(want, ledger()); diff != "" {
			t.Errorf("%s: ledger changed (-want +got):\n%s", name, diff)
		}
	}
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{3: "k3", 4: "k1"}); !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("taken key: err = %v, want ErrAnnounceConflict", err)
	}
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{99: "k99"}); !errors.Is(err, outbox.ErrUnknownEvent) {
		t.Errorf("missing seq: err = %v, want ErrUnknownEvent", err)
	}
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: "other"}); !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("seq holding another key: err = %v, want ErrAnnounceConflict", err)
	}
	if err := s.MarkAnnounced(ctx, "r", nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
}

func TestAnnouncedOnceKeysIsExactlyTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	got, err := s.AnnouncedOnceKeys(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty store: (%v, %v), want an empty ledger", got, err)
	}
	_, s1, _ := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done"))
	_, _, _ = s.EnqueueOnce(ctx, "r", "unit:2", outboxtest.LineOf("done")) // enqueued, never marked
	outboxtest.MustEnqueue(t, s, "r")
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{s1: "unit:1"}); err != nil {
		t.Fatal(err)
	}
	got, err = s.AnnouncedOnceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"unit:1": true}, got); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
}

func TestPendingEventsIsBoundedOrderedAndAfterTheCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 10; i++ {
		outboxtest.MustEnqueue(t, s, "r")
		outboxtest.MustEnqueue(t, s, "other")
	}
	got, err := s.PendingEvents(ctx, "r", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{4, 5, 6, 7}, outboxtest.SeqsOf(got)); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
	for _, l := range got {
		if want := fmt.Sprintf(`{"seq":%d,"type":"x"}`, l.Seq); string(l.Line) != want {
			t.Errorf("line %d = %s, want %s", l.Seq, l.Line, want)
		}
	}
	if got, _ := s.PendingEvents(ctx, "r", 10, 5); len(got) != 0 {
		t.Errorf("after the last seq: %d lines, want 0", len(got))
	}
	for _, limit := range []int{0, -1} {
		if _, err := s.PendingEvents(ctx, "r", 0, limit); err == nil {
			t.Errorf("limit %d: err = %v, want an error", limit, err)
		}
	}
}

// TestPendingEventsFromManyGoroutinesAtOnce: concurrent reads share the store's own read connection
// or take one from the pool; every one of them sees the same lines, and a line's bytes are its own
// (appending to one does not touch the next).
func TestPendingEventsFromManyGoroutinesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 50; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	want := outboxtest.AllLines(t, s, "r")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				got, err := s.PendingEvents(ctx, "r", 0, 50)
				if err != nil {
					errs <- err
					return
				}
				if !cmp.Equal(want, got) {
					errs <- fmt.Errorf("a concurrent read differs: %v", cmp.Diff(want, got))
					return
				}
				_ = append(got[0].Line, "garbage"...)
				if string(got[1].Line) != string(want[1].Line) {
					errs <- fmt.Errorf("appending to one line changed the next: %q", got[1].Line)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEventsUsedSeesBufferedAndLedgerRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	check := func(run string, want bool) {
		t.Helper()
		got, err := s.EventsUsed(ctx, run)
		if err != nil || got != want {
			t.Errorf("EventsUsed(%q) = (%v, %v), want %v", run, got, err, want)
		}
	}
	check("r", false)
	outboxtest.MustEnqueue(t, s, "r")
	check("r", true)
	_, seq, _ := s.EnqueueOnce(ctx, "old", "unit:1", outboxtest.LineOf("done"))
	s.MarkAnnounced(ctx, "old", map[int64]string{seq: "unit:1"})
	if _, err := s.ForgetEvents(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	check("old", true) // only its ledger row is left
}

func TestForgetEventsDropsOtherRunsBufferedRowsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		outboxtest.MustEnqueue(t, s, "old1")
		outboxtest.MustEnqueue(t, s, "old2")
		outboxtest.MustEnqueue(t, s, "current")
	}
	_, seq, _ := s.EnqueueOnce(ctx, "old1", "unit:1", outboxtest.LineOf("done"))
	if err := s.MarkAnnounced(ctx, "old1", map[int64]string{seq: "unit:1"}); err != nil {
		t.Fatal(err)
	}
	_, _, _ = s.EnqueueOnce(ctx, "current", "unit:2", outboxtest.LineOf("done"))
	n, err := s.ForgetEvents(ctx, "current")
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Errorf("forgotten = %d, want 6", n)
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, 4), outboxtest.SeqsOf(outboxtest.AllLines(t, s, "current"))); diff != "" {
		t.Errorf("current run's rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{4}, outboxtest.SeqsOf(outboxtest.AllLines(t, s, "old1"))); diff != "" {
		t.Errorf("old1 rows (-want +got):\n%s", diff)
	}
	if got := outboxtest.CountRows(t, path, "1"); got != 5 {
		t.Errorf("rows left = %d, want 5", got)
	}
	if n, err := s.ForgetEvents(ctx, "current"); err != nil || n != 0 {
		t.Errorf("second ForgetEvents = (%d, %v), want (0, nil)", n, err)
	}
}

func TestWriteTxCommitsCallerRowsAndEventTogetherOrNotAtAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE spend (unit TEXT PRIMARY KEY, cents INTEGER NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	spend := func(unit string, fail bool) error {
		return s.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO spend VALUES (?, 100)`, unit); err != nil {
				return err
			}
			if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("spend")); err != nil {
				return err
			}
			if fail {
				return outboxtest.ErrRender
			}
			return nil
		})
	}
	if err := spend("u1", false); err != nil {
		t.Fatal(err)
	}
	if err := spend("u2", true); !errors.Is(err, outboxtest.ErrRender) {
		t.Fatalf("failing WriteTx: err = %v", err)
	}
	// A builder failure inside EnqueueTx fails the caller's transaction with it, when the caller
	// returns the error.
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO spend VALUES ('u3', 100)`); err != nil {
			return err
		}
		_, err := s.EnqueueTx(ctx, tx, "r", func(int64) ([]byte, error) { return nil, outboxtest.ErrRender })
		return err
	})
	if !errors.Is(err, outboxtest.ErrRender) {
		t.Fatalf("WriteTx with a failing builder: err = %v", err)
	}
	var units []string
	rows, err := outboxtest.RawDB(t, path).Query(`SELECT unit FROM spend ORDER BY unit`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var u string
		rows.Scan(&u)
		units = append(units, u)
	}
	rows.Close()
	if diff := cmp.Diff([]string{"u1"}, units); diff != "" {
		t.Errorf("spend rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{1}, outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))); diff != "" {
		t.Errorf("event seqs (-want +got):\n%s", diff)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 2 {
		t.Errorf("next seq = %d, want 2", got)
	}
}

func TestConcurrentEnqueuesIntoOneRunAreDense(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t, outbox.WithDurability(outbox.DurabilityNormal))
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	seqs := make(chan int64, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("x"))
				if err != nil {
					errs <- err
					return
				}
				seqs <- seq
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(seqs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[int64]bool{}
	for seq := range seqs {
		if seen[seq] {
			t.Errorf("seq %d returned twice", seq)
		}
		seen[seq] = true
	}
	if diff := cmp.Diff(outboxtest.SeqRange(1, workers*each), outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))); diff != "" {
		t.Errorf("stored seqs (-want +got):\n%s", diff)
	}
	if len(seen) != workers*each {
		t.Errorf("%d distinct seqs returned, want %d", len(seen), workers*each)
	}
}

func TestCancelledContextClosedStoreAndEmptyRunIDGetClearErrors(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()

	if _, err := s.EnqueueEvent(cancelled, "r", outboxtest.LineOf("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled EnqueueEvent: %v", err)
	}
	if _, _, err := s.EnqueueOnce(cancelled, "r", "k", outboxtest.LineOf("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled EnqueueOnce: %v", err)
	}
	if err := s.WriteTx(cancelled, func(*sql.Tx) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled WriteTx: %v", err)
	}
	if _, err := s.PendingEvents(cancelled, "r", 0, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled PendingEvents: %v", err)
	}
	// Cancelled while the builder runs: the commit must not happen.
	mid, cancelMid := context.WithCancel(context.Background())
	_, err := s.EnqueueEvent(mid, "r", func(int64) ([]byte, error) {
		cancelMid()
		return []byte("x"), nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled mid-build: %v", err)
	}

	if _, err := s.EnqueueEvent(ctx, "", outboxtest.LineOf("x")); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Errorf("empty run id: %v", err)
	}
	if _, _, err := s.EnqueueOnce(ctx, "", "k", outboxtest.LineOf("x")); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Errorf("empty run id, EnqueueOnce: %v", err)
	}
	if _, err := s.PendingEvents(ctx, "", 0, 1); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Errorf("empty run id, PendingEvents: %v", err)
	}
	if err := s.MarkAnnounced(ctx, "", map[int64]string{1: "k"}); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Errorf("empty run id, MarkAnnounced: %v", err)
	}
	if _, err := s.ForgetEvents(ctx, ""); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Errorf("empty run id, ForgetEvents: %v", err)
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 0 {
		t.Errorf("rows after refused calls = %d, want 0", n)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 1 {
		t.Errorf("first seq after refused calls = %d, want 1", got)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x")); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("closed EnqueueEvent: %v", err)
	}
	if _, err := s.PendingEvents(ctx, "r", 0, 1); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("closed PendingEvents: %v", err)
	}
	if _, err := s.AnnouncedOnceKeys(ctx); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("closed AnnouncedOnceKeys: %v", err)
	}
	if err := s.WriteTx(ctx, func(*sql.Tx) error { return nil }); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("closed WriteTx: %v", err)
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}

func TestInvalidOptionsAreRefused(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/book.db"
	for _, opt := range []outbox.Option{
		outbox.WithBusyTimeout(-1),
		outbox.WithOpTimeout(-1),
		outbox.WithReadPoolSize(0),
		outbox.WithDurability(outbox.Durability(7)),
		outbox.WithLogger(nil),
	} {
		s, err := outbox.Open(context.Background(), path, opt)
		if err == nil {
			s.Close()
			t.Errorf("Open accepted an invalid option")
		}
	}
	if _, err := outbox.Open(context.Background(), ""); err == nil {
		t.Error("Open accepted an empty path")
	}
}

func TestOpenRefusesAFileThatIsNotADatabase(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/not.db"
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := outbox.Open(context.Background(), path); err == nil {
		s.Close()
		t.Error("Open accepted a text file")
	}
	if s, err := outbox.OpenReadOnly(context.Background(), path); err == nil {
		s.Close()
		t.Error("OpenReadOnly accepted a text file")
	}
}
