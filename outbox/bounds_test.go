// SPDX-License-Identifier: Apache-2.0

package outbox_test

// Bounded resources: each test here is a way a heavy user made the library grow or stall, and the
// bound that holds instead. The multi-gigabyte forms run in make reliability (OUTBOX_HEAVY=1).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// heavy reports whether the long forms of the bounds tests run (make reliability).
func heavy() bool { return os.Getenv("OUTBOX_HEAVY") != "" }

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestTheWALShrinksAfterALongReaderLetsGo: a foreign reader holds a read transaction while the engine
// commits, so nothing can be checkpointed and the WAL grows; once the reader lets go and the engine
// commits on, the WAL is cut back to the limit instead of keeping its size until Close.
func TestTheWALShrinksAfterALongReaderLetsGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit = 256 << 10
	s, path := outboxtest.Setup(t, outbox.WithWALSizeLimit(limit))
	line := bytes.Repeat([]byte("x"), 1000)
	enqueue := func(batches int) {
		for i := 0; i < batches; i++ {
			builds := make([]outbox.EventBuilder, 50)
			for k := range builds {
				builds[k] = func(seq int64) ([]byte, error) {
					return fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"pad":%q}`, seq, line), nil
				}
			}
			if _, err := s.EnqueueEvents(ctx, "r", builds); err != nil {
				t.Fatal(err)
			}
		}
	}
	reader := outboxtest.RawDB(t, path)
	tx, err := reader.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM events_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	batches := 100 // 5 MB of lines
	if heavy() {
		batches = 2000
	}
	enqueue(batches)
	grown := walSize(t, path)
	if grown < 4*limit {
		t.Fatalf("the WAL grew to %d bytes only behind the reader; the test needs more", grown)
	}
	tx.Rollback()
	// Commits after the reader let go checkpoint the WAL and start it over, cut back to the limit.
	var after int64
	for i := 0; i < 40; i++ {
		enqueue(1)
		if after = walSize(t, path); after <= limit+128<<10 {
			break
		}
	}
	if after > limit+128<<10 {
		t.Errorf("WAL %d bytes after the reader let go (it grew to %d); want about the limit, %d", after, grown, limit)
	}
	t.Logf("WAL grew to %d bytes behind a reader, then was cut back to %d", grown, after)
}

// TestTheLibrarysOwnReadersHoldNoLongReadTransaction: while a relay, a read-only store and Runs read
// the book, the WAL is still checkpointed and cut back: none of them holds a read transaction beyond
// one bounded query.
func TestTheLibrarysOwnReadersHoldNoLongReadTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit = 256 << 10
	s, path := outboxtest.Setup(t, outbox.WithWALSizeLimit(limit))
	ro, err := outbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	sink := outboxtest.NewMemSink()
	relay := outboxtest.FastRelay(t, s, sink, "r")
	pad := strings.Repeat("x", 1000)
	for i := 0; i < 150; i++ {
		builds := make([]outbox.EventBuilder, 50)
		for k := range builds {
			builds[k] = func(seq int64) ([]byte, error) {
				return fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"pad":%q}`, seq, pad), nil
			}
		}
		if _, err := s.EnqueueEvents(ctx, "r", builds); err != nil {
			t.Fatal(err)
		}
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := collect(ro.AllRuns(ctx)); err != nil {
			t.Fatal(err)
		}
		if _, err := ro.PendingEvents(ctx, "r", 0, 10); err != nil {
			t.Fatal(err)
		}
	}
	if size := walSize(t, path); size > 2*limit+4<<20 {
		t.Errorf("WAL %d bytes with only the library's own readers; a reader held a snapshot", size)
	}
}

// TestAPanicInsideSQLiteFailsTheCallNotTheProcess makes the driver panic at every write and sync of a
// workload, on the group committer's goroutine and on the caller's: the call gets an error
// (ErrStoreBroken), every later call a clear error, Close returns, and the database reopens with
// everything acknowledged.
func TestAPanicInsideSQLiteFailsTheCallNotTheProcess(t *testing.T) {
	t.Parallel()
	setupCalls, total := outboxtest.CountCalls(t, 12)
	broken := 0
	for at := setupCalls + 1; at <= total; at++ {
		label := fmt.Sprintf("panic at call %d", at)
		s, _, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.PanicAt = at })
		acked, err := outboxtest.Workload(s, 12)
		if errors.Is(err, outbox.ErrStoreBroken) {
			broken++
			if _, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("after")); !errors.Is(err, outbox.ErrStoreBroken) {
				t.Errorf("%s: a call after it: %v, want ErrStoreBroken", label, err)
			}
		} else if err != nil && !errors.Is(err, outbox.ErrNotDurable) {
			t.Errorf("%s: %v", label, err)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: Close did not return", label)
		}
		outboxtest.CheckDurable(t, label, path, acked)
	}
	if broken == 0 {
		t.Error("no panic reached a call")
	}
}

// bigLine renders a journal line of exactly n bytes for run and seq.
func bigLine(run string, n int) outbox.EventBuilder {
	return func(seq int64) ([]byte, error) {
		head := fmt.Sprintf(`{"engine_run_id":%q,"seq":%d,"pad":"`, run, seq)
		b := make([]byte, 0, n)
		b = append(b, head...)
		for len(b) < n-2 {
			b = append(b, 'x')
		}
		return append(b, '"', '}'), nil
	}
}

// TestLinesAtTheLargestLimitGoThroughOneAfterAnother stores lines of the largest size WithMaxLineSize
// allows, one after another in one run, in several runs, from concurrent callers, in one EnqueueEvents
// call, and again after a restart, then reads them back: no panic, every line whole. The short form
// uses the default limit; make reliability runs MaxLineSizeLimit.
func TestLinesAtTheLargestLimitGoThroughOneAfterAnother(t *testing.T) {
	if outboxtest.RaceEnabled && !heavy() {
		t.Skip("moves hundreds of MiB through SQLite, which the race detector slows 15 times")
	}
	size := outbox.DefaultMaxLineSize
	if heavy() {
		size = outbox.MaxLineSizeLimit
	}
	ctx := context.Background()
	s, _ := outboxtest.Setup(t, outbox.WithMaxLineSize(size))
	for i := 0; i < 3; i++ {
		if _, err := s.EnqueueEvent(ctx, "a", bigLine("a", size)); err != nil {
			t.Fatalf("line %d of run a: %v", i+1, err)
		}
	}
	errs := make(chan error, 3)
	for _, run := range []string{"b", "c", "d"} {
		go func() { _, err := s.EnqueueEvent(ctx, run, bigLine(run, size)); errs <- err }()
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent large lines: %v", err)
		}
	}
	if _, err := s.EnqueueEvents(ctx, "e", []outbox.EventBuilder{bigLine("e", size), bigLine("e", size)}); err != nil {
		t.Fatalf("EnqueueEvents of two large lines: %v", err)
	}
	s = outboxtest.Reopen(t, s, outbox.WithMaxLineSize(size))
	if _, err := s.EnqueueEvent(ctx, "a", bigLine("a", size)); err != nil {
		t.Fatalf("a large line after a restart: %v", err)
	}
	for run, n := range map[string]int{"a": 4, "b": 1, "e": 2} {
		lines, err := s.PendingEvents(ctx, run, 0, 10)
		if err != nil || len(lines) != n {
			t.Fatalf("run %s: %d lines, %v; want %d", run, len(lines), err, n)
		}
		for _, l := range lines {
			if len(l.Line) != size {
				t.Errorf("run %s seq %d: %d bytes, want %d", run, l.Seq, len(l.Line), size)
			}
		}
	}
}

// TestALargeLineIsStoredApartFromItsRowAndDroppedWithIt: a line past the spill size lives in
// events_lines, so the clustered table's keys never carry it; reads return it byte for byte, and
// forgetting or recovering its run drops it with its row.
func TestALargeLineIsStoredApartFromItsRowAndDroppedWithIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	big := bigLine("old", 64<<10)
	outboxtest.MustEnqueue(t, s, "old")
	if _, err := s.EnqueueEvent(ctx, "old", big); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvents(ctx, "old", []outbox.EventBuilder{big, outboxtest.LineOf("small")}); err != nil {
		t.Fatal(err)
	}
	var apart int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&apart); err != nil || apart != 2 {
		t.Fatalf("lines stored apart: %d, %v; want 2", apart, err)
	}
	if n := outboxtest.CountRows(t, path, "spill <> 0 AND length(line) = 0"); n != 2 {
		t.Errorf("%d rows point at a line stored apart, want 2", n)
	}
	want, _ := big(2)
	lines := outboxtest.AllLines(t, s, "old")
	if len(lines) != 4 || !bytes.Equal(lines[1].Line, want) || len(lines[2].Line) != 64<<10 {
		t.Fatalf("read back: %d lines", len(lines))
	}
	s = outboxtest.Reopen(t, s)
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "new").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&apart); err != nil || apart != 0 {
		t.Errorf("lines stored apart after Recover forgot their rows: %d, %v", apart, err)
	}
}

// TestALineAtTheLimitGoesThroughTheStoreTheJournalAndTheVerifier: a line of exactly the default
// limit is stored, projected and verified byte for byte; one byte more is refused before it is stored,
// naming both sizes, and uses no number.
func TestALineAtTheLimitGoesThroughTheStoreTheJournalAndTheVerifier(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 16 MiB several times")
	}
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	head, tail := `{"engine_run_id":"r","seq":1,"data":"`, `"}`
	big := append([]byte(head), bytes.Repeat([]byte("é"), (outbox.DefaultMaxLineSize-len(head)-len(tail))/2)...)
	for len(big) < outbox.DefaultMaxLineSize-len(tail) {
		big = append(big, 'x')
	}
	big = append(big, tail...)
	if len(big) != outbox.DefaultMaxLineSize {
		t.Fatalf("line of %d bytes", len(big))
	}
	over := append(append([]byte(head), 'x'), big[len(head):]...)
	_, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(over))
	if !errors.Is(err, outbox.ErrInvalidLine) || !strings.Contains(err.Error(), fmt.Sprint(len(over))) ||
		!strings.Contains(err.Error(), fmt.Sprint(outbox.DefaultMaxLineSize)) {
		t.Errorf("a line one byte over the limit: %v, want ErrInvalidLine naming both sizes", err)
	}
	if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(big)); err != nil || seq != 1 {
		t.Fatalf("a line at the limit: (%d, %v), want seq 1", seq, err)
	}
	jpath := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := journal.OpenFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, j, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	f, _ := os.Open(jpath)
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil || rep.Runs["r"].Last != 1 {
		t.Errorf("Verify: (%+v, %v)", rep, err)
	}
	got, _ := os.ReadFile(jpath)
	if !bytes.Equal(got[:len(got)-1], big) {
		t.Error("the journal's line differs from the stored one")
	}
}
