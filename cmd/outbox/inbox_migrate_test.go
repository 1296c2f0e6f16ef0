// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/dirstate"
)

func TestInboxMigrateUpCreatesTheInboxsTables(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "consumer.db")
	code, out, errOut := cli(t, "inbox", "migrate", "up", "--db", dbPath)
	if code != exitOK || out != "applied 00001_inbox.sql\napplied 00002_digest_rows.sql\napplied 00003_source_rewound.sql\napplied 00004_counters.sql\n" || errOut != "" {
		t.Fatalf("up: exit %d, %q %q", code, out, errOut)
	}
	in, err := inbox.OpenReadOnly(context.Background(), dbPath)
	if err != nil {
		t.Fatalf("not an inbox after up: %v", err)
	}
	in.Close()
	if code, out, _ := cli(t, "inbox", "migrate", "version", "--db", dbPath); code != exitOK || out != "4\n" {
		t.Errorf("version: exit %d, %q", code, out)
	}
	if code, out, _ := cli(t, "inbox", "migrate", "up", "--db", dbPath); code != exitOK || out != "nothing to apply: the database is at version 4, the latest\n" {
		t.Errorf("up again: exit %d, %q", code, out)
	}
}

func TestInboxMigrateRefusesBesideARunningConsumer(t *testing.T) {
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "consumer.db"), filepath.Join(dir, "journal.jsonl")
	if err := os.WriteFile(jPath, []byte(`{"engine_run_id":"a","seq":1,"type":"x","data":{}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	consumer := outboxCmd(t, platformCommand, "--db", dbPath, "--journal", jPath, "--follow")
	stdin, err := consumer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := consumer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	consumer.Stderr = os.Stderr
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); consumer.Wait() }()
	// Its first batch report comes once the line is committed: the consumer holds its inbox.
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.HasPrefix(line, "batch 1 ") {
		t.Fatalf("the consumer reported %q, %v", line, err)
	}
	code, out, errOut := runOutbox(t, "inbox", "migrate", "down", "--db", dbPath, "--force")
	if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "is open by a running consumer") {
		t.Errorf("down beside a consumer: exit %d, %q %q", code, out, errOut)
	}
	// Nothing to apply: up has nothing to wait for, and says so.
	code, out, errOut = runOutbox(t, "inbox", "migrate", "up", "--db", dbPath)
	if code != exitOK || !strings.HasPrefix(out, "nothing to apply: the database is at version 4") || !strings.Contains(out, "a running consumer has it open") || errOut != "" {
		t.Errorf("up beside a consumer with nothing to apply: exit %d, %q %q", code, out, errOut)
	}
	if code, out, _ := runOutbox(t, "inbox", "migrate", "version", "--db", dbPath); code != exitOK || out != "4\n" {
		t.Errorf("version beside the consumer after the refusals: exit %d, %q", code, out)
	}
}

func TestInboxMigrateDownRefusesToDropStateWithoutForce(t *testing.T) {
	dbPath, jPath := consumerDB(t)
	// Version 3 drops the position a rewound source was rewound from.
	ctx := context.Background()
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	// Version 4 drops only the counts, which an exporter sees as counters reset: no refusal.
	if code, out, errOut := cli(t, "inbox", "migrate", "down", "--db", dbPath); code != exitOK || out != "rolled back 00004_counters.sql\n" {
		t.Fatalf("down from 4: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut := cli(t, "inbox", "migrate", "down", "--db", dbPath)
	want := "outbox inbox migrate down: rolling back version 3 would drop the position 1 rewound source was rewound from, " +
		"so a file source would not finish a rotated file it had not read to its end, nor a stream source report a retention gap after it; " +
		"nothing was changed (give --force to roll back anyway)\n"
	if code != exitUsage || out != "" || errOut != want {
		t.Fatalf("down from 3: exit %d, %q\n got %q\nwant %q", code, out, errOut, want)
	}
	// Once the source has read again and stored a position, nothing is dropped.
	in, err = inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFile(ctx, jPath, consumerHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	// The Open migrated it up again.
	if code, out, errOut := cli(t, "inbox", "migrate", "down", "--db", dbPath); code != exitOK || out != "rolled back 00004_counters.sql\n" {
		t.Fatalf("down from 4 again: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "inbox", "migrate", "down", "--db", dbPath); code != exitOK || out != "rolled back 00003_source_rewound.sql\n" {
		t.Fatalf("down from 3: exit %d, %q %q", code, out, errOut)
	}
	// Version 2 only reshapes the digests: it goes down without --force.
	if code, out, errOut := cli(t, "inbox", "migrate", "down", "--db", dbPath); code != exitOK || out != "rolled back 00002_digest_rows.sql\n" {
		t.Fatalf("down from 2: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "inbox", "migrate", "down", "--db", dbPath)
	want = "outbox inbox migrate down: rolling back version 1 would drop the high-water marks of 4 runs, 4 quarantines, " +
		"the position of 1 source, 7 digests, so the consumer would apply every line again as new; nothing was changed (give --force to roll back anyway)\n"
	if code != exitUsage || out != "" || errOut != want {
		t.Errorf("down from 1: exit %d, %q\n got %q\nwant %q", code, out, errOut, want)
	}
	if code, out, _ := cli(t, "inbox", "migrate", "version", "--db", dbPath); out != "1\n" {
		t.Errorf("version after the refusal: exit %d, %q", code, out)
	}
	if code, out, errOut := cli(t, "inbox", "migrate", "down", "--db", dbPath, "--force"); code != exitOK || out != "rolled back 00001_inbox.sql\n" {
		t.Errorf("down --force: exit %d, %q %q", code, out, errOut)
	}
	if code, out, _ := cli(t, "inbox", "migrate", "version", "--db", dbPath); out != "0\n" {
		t.Errorf("version after down --force: exit %d, %q", code, out)
	}
}

func TestInboxMigrateRefusesABookAndWhatIsNotADatabase(t *testing.T) {
	bookPath, jPath := book(t)
	bookDir := filepath.Dir(bookPath)
	dir := t.TempDir()
	for _, tc := range []struct{ path, says string }{
		{bookPath, "it is a book"},
		{jPath, "is not a SQLite database"},
		{dir, "is a directory"},
		{filepath.Join(dir, "missing.db"), "does not exist"},
	} {
		for _, action := range []string{"up", "down", "status", "version"} {
			if action == "up" && strings.HasSuffix(tc.path, "missing.db") {
				continue // up creates it
			}
			before, beforeBook := dirstate.Snapshot(t, dir), dirstate.Snapshot(t, bookDir)
			code, out, errOut := cli(t, "inbox", "migrate", action, "--db", tc.path, "--force")
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 ||
				!strings.HasPrefix(errOut, "outbox inbox migrate "+action+": ") || !strings.Contains(errOut, tc.says) {
				t.Errorf("%s %s: exit %d, %q %q; want 2 and one line saying %q", action, tc.path, code, out, errOut, tc.says)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Errorf("%s %s changed the directory (-before +after):\n%s", action, tc.path, diff)
			}
			if diff := cmp.Diff(beforeBook, dirstate.Snapshot(t, bookDir)); diff != "" {
				t.Errorf("%s %s changed the book's directory (-before +after):\n%s", action, tc.path, diff)
			}
		}
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"up", "down", "status", "version"} {
		if code, _, errOut := cli(t, "inbox", "migrate", action, "--db", fifo); code != exitUsage || !strings.Contains(errOut, "not a regular file") {
			t.Errorf("%s on a FIFO: exit %d, %q", action, code, errOut)
		}
	}
}

func TestInboxMigrateStatusWritesNothing(t *testing.T) {
	dbPath, _ := consumerDB(t)
	dir := filepath.Dir(dbPath)
	before := dirstate.Snapshot(t, dir)
	code, out, errOut := runOutbox(t, "inbox", "migrate", "status", "--db", dbPath)
	if code != exitOK || errOut != "" || !strings.HasPrefix(out, "00001_inbox.sql ") || strings.Count(out, " applied ") != 4 {
		t.Errorf("status: exit %d, %q %q", code, out, errOut)
	}
	if code, out, _ := runOutbox(t, "inbox", "migrate", "version", "--db", dbPath); code != exitOK || out != "4\n" {
		t.Errorf("version: exit %d, %q", code, out)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("status or version changed the directory (-before +after):\n%s", diff)
	}
}

func TestInboxMigrateFollowsTheConventions(t *testing.T) {
	if code, out, errOut := cli(t, "inbox", "migrate", "--help"); code != exitOK || errOut != "" ||
		!strings.HasPrefix(out, "usage: outbox inbox migrate up|down|status|version --db FILE [--force]\n       outbox inbox migrate sql --version N [--down]") {
		t.Errorf("--help: exit %d, %q %q", code, out, errOut)
	}
	for _, args := range [][]string{
		{"inbox", "migrate"},
		{"inbox", "migrate", "up"},
		{"inbox", "migrate", "sideways", "--db", "x.db"},
		{"inbox", "migrate", "up", "down", "--db", "x.db"},
	} {
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "outbox inbox migrate: ") {
			t.Errorf("%v: exit %d, %q %q; want 2 and one line", args, code, out, errOut)
		}
	}
}

func TestInboxMigrateRefusesAnInboxOfANewerRelease(t *testing.T) {
	dbPath, _ := consumerDB(t)
	d, err := sql.Open("sqlite3", "file:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO inbox_db_version (version_id, is_applied) VALUES (99, 1)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, action := range []string{"up", "down"} {
		code, out, errOut := cli(t, "inbox", "migrate", action, "--db", dbPath, "--force")
		if code != exitUsage || out != "" || !strings.Contains(errOut, "version 99") {
			t.Errorf("%s: exit %d, %q %q", action, code, out, errOut)
		}
	}
	if code, out, _ := cli(t, "inbox", "migrate", "status", "--db", dbPath); code != exitOK || !strings.Contains(out, "00099 (unknown to this outbox)") {
		t.Errorf("status: exit %d, %q", code, out)
	}
	if code, out, _ := cli(t, "inbox", "migrate", "version", "--db", dbPath); out != "99\n" {
		t.Errorf("version: exit %d, %q", code, out)
	}
}
