// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestRelayProjectsIntoAJournalDirectoryAsSegments(t *testing.T) {
	dir := t.TempDir()
	dbPath, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	// A run projected into the directory, then a run left pending, as a stopped engine leaves it.
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(jDir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.EnqueueEvent(ctx, "done", journal.Builder("done", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := outboxtest.NewRelay(t, s, j, "done").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	for i := range 4 {
		if _, err := s.EnqueueEvent(ctx, "left", journal.Builder("left", "y", i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jDir)
	if code != exitOK || !strings.Contains(out, "projected 4 lines") {
		t.Fatalf("relay --journal DIR: exit %d\n%s%s", code, out, errOut)
	}
	if names, _ := filepath.Glob(filepath.Join(jDir, "*.jsonl")); len(names) != 1 {
		t.Errorf("segments %v, want the directory's one segment appended to", names)
	}
	if code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jDir); code != exitOK {
		t.Errorf("check after the relay: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := cli(t, "verify", jDir); code != exitOK || !strings.Contains(out, "7 unique lines") {
		t.Errorf("verify after the relay: exit %d\n%s", code, out)
	}
}

func TestRelayCreatesAMissingJournalAsADirectoryUnlessItsNameEndsInJsonl(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "book.db")
	project(t, dbPath, "", "r", 2, "x")
	for _, tc := range []struct {
		name string
		dir  bool
	}{{"journal", true}, {"journal.jsonl", false}} {
		p := filepath.Join(dir, tc.name)
		if code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", p); code != exitOK {
			t.Fatalf("relay --journal %s: exit %d\n%s%s", tc.name, code, out, errOut)
		}
		st, err := os.Stat(p)
		if err != nil || st.IsDir() != tc.dir {
			t.Errorf("%s: %v, a directory %v; want a directory %v", tc.name, err, err == nil && st.IsDir(), tc.dir)
		}
		// The second relay found the lines projected: it has nothing to do, but reads the book's
		// projected positions against this journal; a fresh database continues either.
		dbPath = filepath.Join(t.TempDir(), "book.db")
		project(t, dbPath, "", "r", 2, "x")
	}
}

func TestRelayRefusesAnEmptyJournalDirectoryForABookThatProjectedAndLeavesItEmpty(t *testing.T) {
	dir := t.TempDir()
	dbPath, jPath, empty := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "empty")
	project(t, dbPath, jPath, "r", 2, "x")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "relay", "--db", dbPath, "--journal", empty)
	if code != exitUsage || !strings.Contains(errOut, "nothing was written") {
		t.Errorf("relay into an empty directory: exit %d, %q", code, errOut)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the directory now holds %v", entries)
	}
}

func TestRelayPointedAtASegmentOfAJournalDirectoryRefusesAndTheDirectoryStillOpens(t *testing.T) {
	dir := t.TempDir()
	dbPath, file, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "j.jsonl"), filepath.Join(dir, "journal")
	project(t, dbPath, file, "r", 3, "x")
	// Adopted, the file is the sealed first segment, holding every run the book projected.
	if err := journal.Adopt(context.Background(), file, jDir); err != nil {
		t.Fatal(err)
	}
	project(t, dbPath, "", "r", 2, "y")
	seg := filepath.Join(jDir, "00000000000000000000.jsonl")
	before, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", seg)
	if code != exitUsage || !strings.Contains(errOut, "segment") {
		t.Errorf("relay --journal SEGMENT: exit %d\n%s%s; want exit %d saying it is a segment", code, out, errOut, exitUsage)
	}
	if after, _ := os.ReadFile(seg); string(after) != string(before) {
		t.Errorf("the sealed segment was appended to")
	}
	j, err := journal.Open(jDir)
	if err != nil {
		t.Fatalf("the journal directory after the relay: %v", err)
	}
	j.Close()
	if code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jDir); code != exitOK {
		t.Errorf("relay --journal DIR: exit %d\n%s%s", code, out, errOut)
	}
}
