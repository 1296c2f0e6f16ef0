// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestStatsIsReadOnlyAndWorksBesideARunningEngine(t *testing.T) {
	dbPath, _ := book(t)
	s, err := outbox.Open(context.Background(), dbPath) // the engine holds the writer lock
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := fileDigest(t, dbPath, dbPath+"-wal")
	code, out, errOut := cli(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats: %d %s", code, errOut)
	}
	if after := fileDigest(t, dbPath, dbPath+"-wal"); after != before {
		t.Error("stats changed the database files")
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	got := map[string][3]int64{}
	for _, r := range rep.Runs {
		got[r.RunID] = [3]int64{r.LastSeq, r.Projected, r.Pending}
		if r.RunID == "dead" && (r.OldestAge == nil || *r.OldestAge < 0) {
			t.Errorf("dead run's oldest pending age = %v", r.OldestAge)
		}
	}
	if diff := cmp.Diff(map[string][3]int64{"old": {2, 2, 0}, "dead": {3, 0, 3}}, got); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	if rep.FileBytes == 0 {
		t.Error("file_bytes is 0")
	}
	if code, out, _ := cli(t, "stats", "--db", dbPath); code != exitOK || !strings.Contains(out, "dead") {
		t.Errorf("stats: %d %q", code, out)
	}
}

func TestStatsAndPendingRefuseMissingAndNonDatabaseFiles(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("not a database\n"), 0o644)
	before := fileDigest(t, text)
	for _, args := range [][]string{
		{"stats", "--db", filepath.Join(dir, "missing.db")},
		{"stats", "--db", text},
		{"pending", "--db", text, "--run", "r"},
		{"relay", "--db", filepath.Join(dir, "missing.db"), "--journal", filepath.Join(dir, "j")},
	} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	if fileDigest(t, text) != before {
		t.Error("the text file was changed")
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !os.IsNotExist(err) {
		t.Error("a missing database was created")
	}
}

// A redraw reads the whole book: --watch has a floor, so that a typo like 1ns does not keep a core
// and the book's read connection busy beside the engine.
func TestStatsWatchRefusesAnIntervalBelowItsFloor(t *testing.T) {
	code, out, errOut := cli(t, "stats", "--db", "book.db", "--watch", "1ns")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "--watch must be at least") {
		t.Errorf("stats --watch 1ns: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestStatsWatchRedrawsEveryDurationUntilInterrupted(t *testing.T) {
	dbPath, _ := book(t)
	cmd := outboxCmd(t, "stats", "--db", dbPath, "--watch", "50ms")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Off a terminal, one block per refresh: count the header lines.
	sc := bufio.NewScanner(out)
	blocks := 0
	var seen strings.Builder
	for blocks < 3 && sc.Scan() {
		fmt.Fprintln(&seen, sc.Text())
		if strings.Contains(sc.Text(), "highest seq") {
			blocks++
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	if blocks < 3 || err != nil {
		t.Errorf("stats --watch: %d blocks, exit %v\n%s%s", blocks, err, seen.String(), rest)
	}
	if strings.Contains(seen.String(), "\x1b[") {
		t.Error("stats --watch drew terminal escapes into a pipe")
	}
}

func TestStatsSaysWhatItMeans(t *testing.T) {
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
	s.EnqueueEvent(ctx, "gone", journal.Builder("gone", "x", 1))
	s.EnqueueOnce(ctx, "gone", "unit:0", journal.Builder("gone", "unit_done", 0)) // a ledger row, kept
	s.EnqueueEvent(ctx, "gone", journal.Builder("gone", "x", 3))
	s.EnqueueEvent(ctx, "live", journal.Handshake("live", nil))
	s.EnqueueOnce(ctx, "live", "unit:1", journal.Builder("live", "unit_done", 1))
	for _, run := range []string{"gone", "live"} {
		relay, err := outbox.NewRelay(s, j, run, outbox.WithForgetProjected(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ForgetEvents(ctx, "live"); err != nil { // drops run gone's rows but its ledger row
		t.Fatal(err)
	}
	s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", 3))
	s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", 4))
	j.Close()
	defer s.Close() // the engine stays open: the WAL has a size

	// A line enqueued under a clock that has since stepped back an hour.
	insertRows(t, dbPath, []any{"skewed", 1, []byte(`{"seq":1}`), "", time.Now().Add(time.Hour).UnixMilli()})

	code, out, errOut := runOutbox(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats: %d %s", code, errOut)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	type row struct{ Last, Lines, Projected, Pending int64 }
	got := map[string]row{}
	for _, r := range rep.Runs {
		got[r.RunID] = row{r.LastSeq, r.Lines, r.Projected, r.Pending}
		if r.OldestAge != nil && *r.OldestAge < 0 {
			t.Errorf("run %s: oldest age %v, negative", r.RunID, *r.OldestAge)
		}
		if (r.Pending > 0) != (r.OldestAge != nil) {
			t.Errorf("run %s: %d not yet projected, oldest age %v", r.RunID, r.Pending, r.OldestAge)
		}
	}
	want := map[string]row{
		"gone":   {Last: 3, Lines: 1, Projected: 3, Pending: 0}, // the highest seq ever given, not the highest stored
		"live":   {Last: 4, Lines: 4, Projected: 2, Pending: 2},
		"skewed": {Last: 1, Lines: 1, Projected: 0, Pending: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	if rep.Ledger != 2 || rep.FileBytes == 0 || rep.WALBytes == 0 {
		t.Errorf("ledger %d, file %d bytes, WAL %d bytes; want 2 keys and both sizes", rep.Ledger, rep.FileBytes, rep.WALBytes)
	}
	_, out, _ = runOutbox(t, "stats", "--db", dbPath)
	for _, h := range []string{"highest seq", "lines stored", "projected up to", "pending", "oldest pending", "WAL"} {
		if !strings.Contains(out, h) {
			t.Errorf("stats text lacks %q:\n%s", h, out)
		}
	}
}

// TestStatsPrintsABookOfMoreRunsThanAPageWholeAndAsOneJSONDocument: stats prints a page of runs at a
// time; every run of a book of several pages is printed once, in order, in one valid document, and
// the stopped runs are named after the table.
func TestStatsPrintsABookOfMoreRunsThanAPageWholeAndAsOneJSONDocument(t *testing.T) {
	dbPath := emptyBook(t)
	d, err := sql.Open("sqlite3", (&url.URL{Scheme: "file", OmitHost: true, Path: dbPath}).String())
	if err != nil {
		t.Fatal(err)
	}
	runs := 2*statsPage + 7
	if _, err := d.Exec(`WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM r WHERE n < ? - 1)
		INSERT INTO events_outbox (engine_run_id, seq, line) SELECT printf('run-%05d', n), 1, '{}' FROM r`, runs); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO outbox_stops (engine_run_id, seq, reason, stopped_at) VALUES ('run-00600', 1, 'refused', 0)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	code, out, errOut := runOutbox(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats --json: %d %s", code, errOut)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json is not one document: %v\n%.300s", err, out)
	}
	if len(rep.Runs) != runs || rep.Runs[0].RunID != "run-00000" || rep.Runs[runs-1].RunID != fmt.Sprintf("run-%05d", runs-1) {
		t.Fatalf("stats --json listed %d runs, want %d in order", len(rep.Runs), runs)
	}
	if rep.Runs[600].Stopped == nil || rep.Runs[601].Stopped != nil {
		t.Errorf("the stopped run is not marked alone: %+v %+v", rep.Runs[600], rep.Runs[601])
	}
	code, out, errOut = runOutbox(t, "stats", "--db", dbPath)
	if code != exitOK {
		t.Fatalf("stats: %d %s", code, errOut)
	}
	if n := strings.Count(out, "run-0"); n != runs+1 || !strings.Contains(out, fmt.Sprintf("%d runs", runs)) ||
		!strings.Contains(out, "run run-00600 stopped at seq 1") {
		t.Errorf("stats names runs %d times, want each once and the stopped one again; header and end:\n%.300s\n…\n%s", n, out, out[max(0, len(out)-300):])
	}
}

func statsJSON(t *testing.T, dbPath string) statsReport {
	t.Helper()
	code, out, errOut := runOutbox(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats --json: exit %d, %s", code, errOut)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
