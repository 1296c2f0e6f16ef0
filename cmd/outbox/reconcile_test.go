// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// projectOrders opens the book and the journal, places orders under run, each announced once, and
// projects them.
func projectOrders(t *testing.T, dbPath, dir, run string, keys ...string) {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.Open(dir)
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
	for _, k := range keys {
		if _, _, err := s.EnqueueOnce(ctx, run, k, journal.Event("order_placed", k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReconcileListsWithoutYesAndRecordsWithItSoThatTheRelayStarts(t *testing.T) {
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	projectOrders(t, dbPath, dir, "monday", "a", "b")
	saved, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	projectOrders(t, dbPath, dir, "tuesday", "c", "d", "e")
	os.Remove(dbPath + "-wal")
	os.Remove(dbPath + "-shm")
	if err := os.WriteFile(dbPath, saved, 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := cli(t, "reconcile", "--db", dbPath, "--journal", dir)
	if code != exitFindings || errOut != "" || !strings.Contains(out, "run tuesday: not in the book -> journal 3") ||
		!strings.Contains(out, "1 run, 3 once keys the ledger lacks: nothing was changed") {
		t.Fatalf("without --yes: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "reconcile", "--db", dbPath, "--journal", dir, "--yes")
	if code != exitOK || errOut != "" || !strings.Contains(out, "recorded 1 run position and 3 once keys into the ledger") {
		t.Fatalf("with --yes: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = cli(t, "reconcile", "--db", dbPath, "--journal", dir)
	if code != exitOK || !strings.Contains(out, "nothing to change") {
		t.Fatalf("again: exit %d, stdout %q", code, out)
	}

	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"c", "d", "e"} {
		if ok, _, err := s.EnqueueOnce(ctx, "wednesday", k, journal.Event("order_placed", k)); err != nil || ok {
			t.Fatalf("key %s after reconcile: announcing %v, %v", k, ok, err)
		}
	}
}

func TestReconcileRefusesAJournalTheEngineHasOpenAndChangesNothing(t *testing.T) {
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	projectOrders(t, dbPath, dir, "monday", "a")
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	code, _, errOut := cli(t, "reconcile", "--db", dbPath, "--journal", dir, "--yes")
	if code != exitUsage || !strings.Contains(errOut, "is the engine running?") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := cli(t, "reconcile", "--db", dbPath); code != exitUsage {
		t.Fatalf("without --journal: exit %d", code)
	}
}
