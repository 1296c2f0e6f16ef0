// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// stuckBook makes a database whose run "r" holds a line keyed by the wrong seq, at seq 2, between two
// good ones, and returns it with the line's bytes and a journal path.
func stuckBook(t *testing.T) (dbPath, jPath string, bad []byte) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.EnqueueEvent(ctx, "r", journal.Handshake("r", nil))
	s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) { return journal.Builder("r", "spend", 5)(seq + 1) })
	s.EnqueueEvent(ctx, "r", journal.Builder("r", "spend", 6))
	lines, err := s.PendingEvents(ctx, "r", 1, 1)
	if err != nil || len(lines) != 1 {
		t.Fatal(lines, err)
	}
	return dbPath, jPath, lines[0].Line
}

func TestAStoppedRunIsShownByStatsAndMetricsUntilRetireLetsItProjectOn(t *testing.T) {
	dbPath, jPath, bad := stuckBook(t)
	if code, _, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath); code != exitUsage || !strings.Contains(errOut, `run "r"`) {
		t.Fatalf("relay over the bad line: exit %d, %q; want 2 naming the run", code, errOut)
	}
	rep := statsJSON(t, dbPath)
	if len(rep.Runs) != 1 || rep.Runs[0].Stopped == nil || rep.Runs[0].Stopped.Seq != 1 ||
		!strings.Contains(rep.Runs[0].Stopped.Reason, "seq 2") || rep.Runs[0].Stopped.At.IsZero() {
		t.Fatalf("stats --json: %+v; want run r stopped at 1, the reason naming seq 2", rep.Runs)
	}
	code, out, _ := runOutbox(t, "stats", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, "stopped at seq") || !strings.Contains(out, "run r stopped at seq 1") {
		t.Errorf("stats: exit %d\n%s", code, out)
	}
	url, stop := startMetrics(t, dbPath)
	if m := scrape(t, url); m[`outbox_run_stopped{run="r"}`] != 1 || m[`outbox_stopped_runs`] != 1 {
		t.Errorf("outbox_run_stopped of r %v, outbox_stopped_runs %v; want 1 each", m[`outbox_run_stopped{run="r"}`], m[`outbox_stopped_runs`])
	}

	saved := filepath.Join(t.TempDir(), "seq2.line")
	code, out, errOut := runOutbox(t, "retire", "--db", dbPath, "--run", "r", "--seq", "2", "--reason", "rendered with the wrong seq", "--save", saved)
	if code != exitOK || !strings.Contains(out, "retired line 2 of run r") {
		t.Fatalf("retire: exit %d, %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(saved); err != nil || string(b) != string(bad) {
		t.Errorf("--save wrote %q, %v; want %q", b, err, bad)
	}
	if code, _, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("relay after retire: exit %d, %s", code, errOut)
	}
	if code, out, errOut := runOutbox(t, "verify", jPath); code != exitOK {
		t.Errorf("verify: exit %d\n%s%s", code, out, errOut)
	}
	for _, r := range statsJSON(t, dbPath).Runs {
		if r.Stopped != nil {
			t.Errorf("run %s still shown stopped after it projected: %+v", r.RunID, r.Stopped)
		}
	}
	m := scrape(t, url)
	if _, ok := m[`outbox_run_stopped{run="r"}`]; ok || m[`outbox_stopped_runs`] != 0 || m[`outbox_up`] != 1 {
		t.Errorf("after the run projected: outbox_run_stopped of r present %v, outbox_stopped_runs %v", ok, m[`outbox_stopped_runs`])
	}
	stop()
}

func TestRetireRefusesAProjectedLineAnExistingSaveFileAndARunningEngine(t *testing.T) {
	dbPath, jPath, _ := stuckBook(t)
	before := fileDigest(t, dbPath)
	if code, _, errOut := cli(t, "retire", "--db", dbPath, "--run", "r", "--seq", "4", "--reason", "x"); code != exitUsage || !strings.Contains(errOut, "no such event") {
		t.Errorf("a seq not stored: exit %d, %q", code, errOut)
	}
	existing := filepath.Join(t.TempDir(), "exists")
	os.WriteFile(existing, []byte("keep"), 0o600)
	if code, _, errOut := cli(t, "retire", "--db", dbPath, "--run", "r", "--seq", "2", "--reason", "x", "--save", existing); code != exitUsage || !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("an existing --save file: exit %d, %q", code, errOut)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Errorf("the existing file was overwritten: %q", b)
	}
	for _, args := range [][]string{
		{"retire", "--db", dbPath, "--run", "r", "--seq", "0", "--reason", "x"},
		{"retire", "--db", dbPath, "--run", "r", "--seq", "2"},
		{"retire", "--db", dbPath, "--seq", "2", "--reason", "x"},
	} {
		if code, _, _ := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d; want a usage error", args, code)
		}
	}
	s, err := outbox.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runOutbox(t, "retire", "--db", dbPath, "--run", "r", "--seq", "2", "--reason", "x"); code != exitUsage || !strings.Contains(errOut, "locked") {
		t.Errorf("beside a running engine: exit %d, %q", code, errOut)
	}
	s.Close()
	if after := fileDigest(t, dbPath); after != before {
		t.Error("a refused retire changed the database")
	}
	// Once the line is projected, it cannot be retired.
	if code, _, _ := runOutbox(t, "retire", "--db", dbPath, "--run", "r", "--seq", "2", "--reason", "x"); code != exitOK {
		t.Fatal("retire")
	}
	if code, _, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("relay: %s", errOut)
	}
	if code, _, errOut := cli(t, "retire", "--db", dbPath, "--run", "r", "--seq", "1", "--reason", "x"); code != exitUsage || !strings.Contains(errOut, "already projected") {
		t.Errorf("a projected line: exit %d, %q", code, errOut)
	}
}

// relay and retire act on an existing book. Pointed at a file that holds none (an empty file,
// another program's database, a consumer's inbox) they must say so and leave it as it was, not
// migrate the outbox's tables into it, and relay must create no journal beside it.
func TestRelayAndRetireRefuseADatabaseThatHoldsNoBookAndChangeNothing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	d, err := sql.Open("sqlite3", "file:"+other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`CREATE TABLE x (a)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	consumer, _ := consumerDB(t)
	for _, db := range []string{empty, other, consumer} {
		before := fileDigest(t, db)
		jPath := filepath.Join(t.TempDir(), "j.jsonl")
		for _, args := range [][]string{
			{"relay", "--db", db, "--journal", jPath},
			{"retire", "--db", db, "--run", "a", "--seq", "1", "--reason", "r"},
		} {
			code, out, errOut := cli(t, args...)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no book") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 saying it holds no book", args, code, out, errOut)
			}
		}
		if fileDigest(t, db) != before {
			t.Errorf("%s was changed", db)
		}
		if _, err := os.Stat(jPath); !os.IsNotExist(err) {
			t.Errorf("relay created the journal beside %s (%v)", db, err)
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(db + suffix); !os.IsNotExist(err) {
				t.Errorf("%s%s created (%v)", db, suffix, err)
			}
		}
	}
}

// The tombstone carries the SHA-256 and size of the line it replaced. A retire run again on the
// same seq (a command repeated from the shell's history) would replace it with a tombstone of the
// tombstone, and the record of the original's bytes would be gone.
func TestRetireRefusesALineAlreadyRetiredAndKeepsItsTombstone(t *testing.T) {
	dbPath, _ := book(t)
	if code, _, errOut := cli(t, "retire", "--db", dbPath, "--run", "dead", "--seq", "3", "--reason", "bad line"); code != exitOK {
		t.Fatalf("first retire: exit %d, %s", code, errOut)
	}
	_, tombstone, _ := cli(t, "pending", "--db", dbPath, "--run", "dead", "--raw")
	save := filepath.Join(t.TempDir(), "saved")
	code, out, errOut := cli(t, "retire", "--db", dbPath, "--run", "dead", "--seq", "3", "--reason", "again", "--save", save)
	if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "already retired") {
		t.Errorf("second retire: exit %d, stdout %q, stderr %q; want exit 2 saying it is already retired", code, out, errOut)
	}
	if _, after, _ := cli(t, "pending", "--db", dbPath, "--run", "dead", "--raw"); after != tombstone {
		t.Errorf("the tombstone changed:\n%s\nnow\n%s", tombstone, after)
	}
	if _, err := os.Stat(save); !os.IsNotExist(err) {
		t.Errorf("--save wrote %s (%v)", save, err)
	}
}
