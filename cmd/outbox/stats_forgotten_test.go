// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// A run whose lines the relay forgot after projecting them is still a run of the book (check counts
// it): stats says how many runs the book knows, beside the runs it lists, which have lines stored.
func TestStatsCountsTheRunsWhoseLinesAreAllForgotten(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.EnqueueEvent(ctx, "gone", journal.Builder("gone", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	relay, err := outbox.NewRelay(s, j, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", 1)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	s.Close()

	code, out, errOut := cli(t, "stats", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, "; 2 runs\nlisted: the 1 with lines stored; 1 whose lines are all forgotten are counted, not listed\n") || !strings.Contains(out, "live") || strings.Contains(out, "gone") {
		t.Errorf("stats: exit %d, stdout %q, stderr %q; want 2 runs, the 1 with lines stored (live) listed", code, out, errOut)
	}
	code, out, errOut = cli(t, "stats", "--db", dbPath, "--json")
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || rep.RunsKnown != 2 || len(rep.Runs) != 1 {
		t.Errorf("stats --json: exit %d, %v, %+v, stderr %q", code, err, rep, errOut)
	}
	if code, out, _ := cli(t, "check", "--db", dbPath, "--journal", jPath); code != exitOK || !strings.Contains(out, "2 runs") {
		t.Errorf("check: exit %d, %q", code, out)
	}
}
