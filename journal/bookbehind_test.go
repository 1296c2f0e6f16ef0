// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// life is one process of an engine: it opens the book and the journal, recovers, and places orders
// under its run, each announced once under its key, projecting them before it stops.
func life(t *testing.T, dbPath, dir, run string, orders []string) {
	t.Helper()
	ctx := outboxtest.Patient(t)
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.Open(dir, journal.WithSegmentSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	relay, err := outbox.NewRelay(s, j, run)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
		t.Fatal(err)
	}
	for _, o := range orders {
		if ok, _, err := s.EnqueueOnce(ctx, run, o, journal.Event("order_placed", o)); err != nil || !ok {
			t.Fatalf("order %s: announcing %v, %v", o, ok, err)
		}
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// backup copies the book (closed, so its file is whole) to dst.
func backup(t *testing.T, src, dst string) {
	t.Helper()
	for _, ext := range []string{"", "-wal"} {
		b, err := os.ReadFile(src + ext)
		if errors.Is(err, os.ErrNotExist) && ext != "" {
			os.Remove(dst + ext)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+ext, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(dst + "-shm")
}

// journalBytes is the size of every segment of dir together.
func journalBytes(t *testing.T, dir string) int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, name := range names {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

func orders(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("order-%d", i))
	}
	return out
}

func TestABookRestoredFromABackupTakenOrdersEarlierStopsTheRelayNamingTheRunAndAppendsNothing(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir, saved := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal"), filepath.Join(tmp, "backup.db")
	life(t, dbPath, dir, "monday", orders(1, 10))
	backup(t, dbPath, saved)
	// 7 orders after the backup, in the next life of the engine.
	life(t, dbPath, dir, "tuesday", orders(11, 17))
	backup(t, saved, dbPath)

	ctx := outboxtest.Patient(t)
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.Open(dir, journal.WithSegmentSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	before := journalBytes(t, dir)
	relay, err := outbox.NewRelay(s, j, "wednesday")
	if err != nil {
		t.Fatal(err)
	}
	err = relay.Recover(ctx)
	if !errors.Is(err, outbox.ErrBookBehind) || !strings.Contains(err.Error(), `"tuesday"`) || strings.Contains(err.Error(), `"monday"`) {
		t.Fatalf("Recover: %v; want ErrBookBehind naming run tuesday alone", err)
	}
	// The engine would redo the lost orders under its new run: the relay sends none of it.
	if _, err := s.EnqueueEvent(ctx, "wednesday", journal.Handshake("wednesday", nil)); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.EnqueueOnce(ctx, "wednesday", "order-11", journal.Event("order_placed", "order-11")); err != nil || !ok {
		t.Fatalf("the restored book announces order-11 again: %v, %v", ok, err)
	}
	if err := relay.Flush(ctx); !errors.Is(err, outbox.ErrBookBehind) {
		t.Fatalf("Flush: %v; want ErrBookBehind", err)
	}
	if err := relay.Run(ctx); !errors.Is(err, outbox.ErrBookBehind) {
		t.Fatalf("Run: %v; want ErrBookBehind", err)
	}
	if after := journalBytes(t, dir); after != before {
		t.Fatalf("the journal grew from %d to %d bytes", before, after)
	}
	j.Close()
	// The restored book holds order-11 pending under the new run: reconcile names the conflict, and
	// once the line is retired, records the journal's positions and keys.
	rep, err := journal.Reconcile(ctx, s, dir, true)
	if !errors.Is(err, outbox.ErrAnnounceConflict) || !strings.Contains(err.Error(), "order-11") {
		t.Fatalf("Reconcile beside a key announced again: %+v, %v; want ErrAnnounceConflict naming order-11", rep, err)
	}
	if err := s.RetireEvent(ctx, "wednesday", 2, "announced again by a restored book"); err != nil {
		t.Fatal(err)
	}
	rep, err = journal.Reconcile(ctx, s, dir, true)
	if err != nil || !rep.Applied || len(rep.Runs) != 1 || rep.Runs[0].RunID != "tuesday" || rep.Runs[0].SinkLast != 8 {
		t.Fatalf("Reconcile: %+v, %v", rep, err)
	}
	if rep, err := journal.Reconcile(ctx, s, dir, false); err != nil || len(rep.Runs) != 0 {
		t.Fatalf("Reconcile again: %+v, %v; want nothing left to change", rep, err)
	}

	j, err = journal.Open(dir, journal.WithSegmentSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	relay, err = outbox.NewRelay(s, j, "wednesday")
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range orders(11, 17) {
		if ok, _, err := s.EnqueueOnce(ctx, "wednesday", o, journal.Event("order_placed", o)); err != nil || ok {
			t.Fatalf("order %s after reconcile: announcing %v, %v; want the ledger to refuse it", o, ok, err)
		}
	}
	if ok, _, err := s.EnqueueOnce(ctx, "wednesday", "order-18", journal.Event("order_placed", "order-18")); err != nil || !ok {
		t.Fatalf("a new order after reconcile: announcing %v, %v", ok, err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if last, err := j.LastSeq("tuesday"); err != nil || last != 8 {
		t.Fatalf("tuesday ends at %d, %v", last, err)
	}
	if st, err := collect(s.AllRuns(ctx)); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range st {
			if r.RunID == "tuesday" && (r.Projected != 8 || r.LastSeq != 8) {
				t.Fatalf("tuesday in the book: %+v", r)
			}
		}
	}
}

func TestAJournalTheBookIsAheadOfStartsFine(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	life(t, dbPath, dir, "monday", orders(1, 5))

	// The next life enqueues and stops before projecting: the book holds lines the journal lacks.
	// The last two reach the journal without their record, as a crash between the append and the
	// record leaves them.
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "tuesday", journal.Handshake("tuesday", nil)); err != nil {
		t.Fatal(err)
	}
	for _, o := range orders(6, 9) {
		if _, _, err := s.EnqueueOnce(ctx, "tuesday", o, journal.Event("order_placed", o)); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := s.PendingEvents(ctx, "tuesday", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(ctx, "tuesday", pending); err != nil {
		t.Fatal(err)
	}
	j.Close()
	s.Close()

	life(t, dbPath, dir, "wednesday", orders(10, 11))
	j, err = journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if last, err := j.LastSeq("tuesday"); err != nil || last != 5 {
		t.Fatalf("tuesday ends at %d, %v; want 5", last, err)
	}
}

func TestAnEventEnqueuedOnceCarriesItsKeyInItsLineAndTheLineStillVerifies(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	life(t, dbPath, dir, "monday", []string{"k-\u00e9\"1"})
	b, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "once_key") || !strings.Contains(lines[1], `,"once_key":"k-é\"1","data":`) {
		t.Fatalf("lines:\n%s", b)
	}
	for i, l := range lines {
		if err := journal.CheckLine("monday", int64(i+1), []byte(l)); err != nil {
			t.Errorf("line %d: %v", i+1, err)
		}
	}
	rep, err := journal.Verify(strings.NewReader(string(b)))
	if err != nil || rep.Runs["monday"].Last != 2 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}
