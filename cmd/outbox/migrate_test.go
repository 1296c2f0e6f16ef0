// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func journalReport(t *testing.T, jPath string) journal.Report {
	t.Helper()
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

func migrateVersion(t *testing.T, dbPath string) string {
	t.Helper()
	_, out, _ := runOutbox(t, "migrate", "version", "--db", dbPath)
	return strings.TrimSpace(out)
}

func TestMigrateDownRefusesToDropPositionsTheRowsDoNotShow(t *testing.T) {
	dbPath, _ := book(t) // run "old": 2 lines projected, still stored; run "dead": 3 pending
	for _, from := range []string{"9, the mark of the sink the next start does without", "8, the runs' marks the figures rebuild", "7, the figures' counting handed back to the triggers", "6, no ledger line emptied", "5, figures the rows rebuild", "4, no run stopped", "3, nothing forgotten"} {
		if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
			t.Fatalf("down from %s: exit %d, %s", from, code, errOut)
		}
	}
	code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath)
	if code != exitUsage || !strings.Contains(errOut, "the projected positions of 1 run") ||
		!strings.Contains(errOut, "2 stored lines the sink has would be sent to it again") || !strings.Contains(errOut, "--force") {
		t.Errorf("down from 2 with projected rows: exit %d, %q", code, errOut)
	}
	if v := migrateVersion(t, dbPath); v != "2" {
		t.Errorf("version after a refused down: %s, want 2", v)
	}
}

func TestMigrateDownNeedsNoForceWhenTheRowsShowEveryPosition(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := dir+"/book.db", dir+"/journal.jsonl"
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		s.EnqueueEvent(ctx, "r", journal.Builder("r", "x", i))
	}
	s.EnqueueOnce(ctx, "r", "unit:4", journal.Builder("r", "unit_done", 4))
	// Recovered by the next start: the rows up to 4 are forgotten but for the ledger row at the top.
	if err := outboxtest.NewRelay(t, s, j, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = outbox.Open(ctx, dbPath); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, j, "next").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	j.Close()
	// Version 9 drops the book's mark of its sink (the next start compares every run), version 8
	// marks the runs recovery visits, which the figures show, and version 7 hands the figures'
	// counting back to the triggers: none loses anything.
	for _, from := range []string{"9", "8", "7"} {
		if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
			t.Fatalf("down from %s: exit %d, %s", from, code, errOut)
		}
	}
	// Version 6 keeps the ledger row's digest in place of its line: rolling it back drops the digest.
	code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath)
	if code != exitUsage || !strings.Contains(errOut, "the digests of 1 projected once-keyed line") {
		t.Fatalf("down from 6: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath, "--force"); code != exitOK {
		t.Fatalf("down --force from 6: exit %d, %s", code, errOut)
	}
	for range 3 { // 4 → 1
		if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
			t.Fatalf("down: exit %d, %s", code, errOut)
		}
	}
	if code, _, errOut := runOutbox(t, "migrate", "up", "--db", dbPath); code != exitOK {
		t.Fatalf("up: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("relay after down and up: exit %d, %s", code, errOut)
	}
	if rep := journalReport(t, jPath); rep.Lines != 4 || rep.Duplicates != 0 {
		t.Errorf("journal after down, up and relay: %d lines, %d duplicates, want 4 and 0", rep.Lines, rep.Duplicates)
	}
	// The run goes on after the seq its ledger row proves.
	if s, err = outbox.Open(ctx, dbPath); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if seq, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "x", 5)); err != nil || seq != 5 {
		t.Errorf("next seq of the run: %d, %v; want 5", seq, err)
	}
}

func TestABookMigratedDownWithForceAndUpIsRelayedWithNothingSentAsNew(t *testing.T) {
	dbPath, jPath := book(t)
	for range 3 { // 4 → 1
		if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath, "--force"); code != exitOK {
			t.Fatalf("down --force: exit %d, %s", code, errOut)
		}
	}
	if code, _, errOut := runOutbox(t, "migrate", "up", "--db", dbPath); code != exitOK {
		t.Fatalf("up: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("relay after down --force and up: exit %d, %s", code, errOut)
	}
	if code, out, errOut := runOutbox(t, "verify", jPath); code != exitOK {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
	}
	// Run "old"'s two lines were projected, which nothing left in the book shows: they are sent
	// again, byte for byte, and read as duplicates; run "dead"'s three are new.
	rep := journalReport(t, jPath)
	if old, dead := rep.Runs["old"], rep.Runs["dead"]; old.Lines != 2 || old.Duplicates > 2 || dead.Lines != 3 || dead.Duplicates != 0 {
		t.Errorf("journal: old %+v, dead %+v", old, dead)
	}
	// A second relay has nothing left to send.
	size := func() int64 {
		st, err := os.Stat(jPath)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	before := size()
	if code, _, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK || size() != before {
		t.Errorf("second relay: exit %d, journal %d bytes, was %d: %s", code, size(), before, errOut)
	}
}
