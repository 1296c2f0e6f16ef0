// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// contents is what the database holds, read through the library: every run's figures and lines.
func contents(t *testing.T, dbPath string) string {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := s.Runs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "%q last %d lines %d projected %d\n", r.RunID, r.LastSeq, r.Lines, r.Projected)
		lines, err := s.PendingEvents(ctx, r.RunID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "%d %s\n", l.Seq, l.Line)
		}
	}
	keys, err := s.AnnouncedOnceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "ledger %d\n", len(keys))
	return b.String()
}

func TestRelayWritesOnlyIntoAJournalThatContinuesTheDatabase(t *testing.T) {
	dbPath, _ := book(t) // run "old" is projected up to 2
	dir := t.TempDir()
	otherDB := filepath.Join(dir, "other.db")
	s, err := outbox.Open(context.Background(), otherDB)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	otherJournal := `{"engine_run_id":"x","seq":1}` + "\n" + `{"engine_run_id":"x","seq":2}` + "\n"
	for _, tc := range []struct {
		name, content, says string
	}{
		{"a SQLite database", "", "not a journal"},
		{"a text file", "dear diary\nno newline at the end", "not a journal"},
		{"a binary file", string(binary), "not a journal"},
		{"an empty file", "", `holds run old up to seq 0, but the database records it projected up to seq 2`},
		{"a new file", "", `holds run old up to seq 0, but the database records it projected up to seq 2`},
		{"another book's journal", otherJournal, `holds run old up to seq 0, but the database records it projected up to seq 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			switch tc.name {
			case "a SQLite database":
				target = otherDB
			case "a new file":
			default:
				if err := os.WriteFile(target, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before, beforeDB := dirstate.Snapshot(t, dir), contents(t, dbPath)
			code, out, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", target)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.says) {
				t.Errorf("relay into %s: exit %d, stdout %q, stderr %q; want 2 and one line saying %q", tc.name, code, out, errOut, tc.says)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Errorf("the journal's directory changed (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeDB, contents(t, dbPath)); diff != "" {
				t.Errorf("the database changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestDBAndJournalAreFilePathsTakenLiterally(t *testing.T) {
	for _, name := range []string{"a%41.db", "book?.db", "x.db?mode=memory"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			jName := "j" + strings.TrimSuffix(name, ".db") + ".jsonl"
			in := func(args ...string) {
				t.Helper()
				cmd := outboxCmd(t, args...)
				cmd.Dir = dir
				if code, out, errOut := runCmd(t, cmd); code != exitOK {
					t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
				}
			}
			in("migrate", "up", "--db", name)
			s, err := outbox.Open(context.Background(), filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnqueueEvent(context.Background(), "r", journal.Handshake("r", nil)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			in("migrate", "status", "--db", name)
			in("migrate", "version", "--db", name)
			in("stats", "--db", name)
			in("pending", "--db", name, "--run", "r")
			in("relay", "--db", name, "--journal", jName)
			in("verify", jName)
			in("migrate", "down", "--db", name, "--force")
			var names []string
			for n := range dirstate.Snapshot(t, dir) {
				names = append(names, n)
			}
			if diff := cmp.Diff([]string{name, jName}, names, sortStrings); diff != "" {
				t.Errorf("files in the directory (-want +got):\n%s", diff)
			}
		})
	}
}

// readOnlyRuns are the read-only commands, each run on the book at db with journal j.
func readOnlyRuns(db, j string) [][]string {
	return [][]string{
		{"stats", "--db", db},
		{"stats", "--db", db, "--json"},
		{"pending", "--db", db, "--run", "dead"},
		{"pending", "--db", db, "--run", "old", "--all"},
		{"verify", j},
		{"verify", "--json", j},
		{"migrate", "status", "--db", db},
		{"migrate", "version", "--db", db},
		{"check", "--db", db, "--journal", j},
	}
}

func TestReadOnlyCommandsWriteNothing(t *testing.T) {
	t.Run("on a book that no engine holds open", func(t *testing.T) {
		dbPath, jPath := book(t)
		dir := filepath.Dir(dbPath)
		before := dirstate.Snapshot(t, dir)
		for _, args := range readOnlyRuns(dbPath, jPath) {
			if code, _, errOut := runOutbox(t, args...); code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Fatalf("%v changed the directory (-before +after):\n%s", args, diff)
			}
		}
	})
	t.Run("in a directory the user cannot write", func(t *testing.T) {
		base, err := os.MkdirTemp("", "outbox-cli-ro-")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(base, "book")
		t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(base) })
		srcDB, srcJ := book(t)
		os.Mkdir(dir, 0o755)
		dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
		dirstate.CopyFile(t, srcDB, dbPath, 0o444)
		dirstate.CopyFile(t, srcJ, jPath, 0o444)
		os.Chmod(dir, 0o555)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "outbox")
		os.Chmod(base, 0o755)
		dirstate.CopyFile(t, exe, bin, 0o755)
		before := dirstate.Snapshot(t, dir)
		for _, args := range readOnlyRuns(dbPath, jPath) {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), asOutbox+"=1")
			if os.Geteuid() == 0 { // permissions do not bind root: read as nobody
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			if code, _, errOut := runCmd(t, cmd); code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
		if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("the directory changed (-before +after):\n%s", diff)
		}
	})
	t.Run("beside a running engine", func(t *testing.T) {
		dbPath, jPath := book(t)
		s, err := outbox.Open(context.Background(), dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.EnqueueEvent(context.Background(), "dead", journal.Builder("dead", "late", nil)); err != nil {
			t.Fatal(err)
		}
		for _, args := range readOnlyRuns(dbPath, jPath) {
			if code, _, errOut := runOutbox(t, args...); code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
		if _, out, _ := runOutbox(t, "pending", "--db", dbPath, "--run", "dead"); strings.Count(out, "\n") != 4 {
			t.Errorf("pending beside the engine does not show its commit:\n%s", out)
		}
	})
}

func TestMigrateDownDoesNotSilentlyDestroy(t *testing.T) {
	dbPath, _ := book(t) // five events stored, one once key still pending in run "dead"
	version := func() string {
		_, out, _ := runOutbox(t, "migrate", "version", "--db", dbPath)
		return strings.TrimSpace(out)
	}
	// Run "gone" keeps its ledger row at seq 1 after seqs 1-2 are forgotten: only last_seq (version 3)
	// remembers that it reached 2.
	s, err := outbox.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	s.EnqueueOnce(context.Background(), "gone", "g", journal.Builder("gone", "x", 1))
	s.EnqueueEvent(context.Background(), "gone", journal.Builder("gone", "x", 2))
	s.MarkAnnounced(context.Background(), "gone", map[int64]string{1: "g"})
	if _, err := s.ForgetEvents(context.Background(), "dead"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Version 9 drops the book's mark of its sink (the next start compares every run), version 8
	// marks the runs recovery visits, which the figures show, and version 7 hands the figures'
	// counting back to the triggers: none loses anything.
	for _, from := range []string{"9", "8", "7"} {
		if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
			t.Fatalf("down from %s: exit %d, %s", from, code, errOut)
		}
	}
	// No ledger line emptied (MarkAnnounced alone leaves the line): version 6 rolls back and loses
	// nothing; no run stopped: nor does version 4.
	if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
		t.Fatalf("down from 6 without an emptied ledger line: exit %d, %s", code, errOut)
	}
	// The per-run figures: version 5 rolls back and loses nothing.
	if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
		t.Fatalf("down from 5: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath); code != exitOK {
		t.Fatalf("down from 4 without a stopped run: exit %d, %s", code, errOut)
	}
	code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath)
	if code != exitUsage || !strings.Contains(errOut, "the highest seq of 2 runs whose lines were forgotten") || !strings.Contains(errOut, "--force") {
		t.Errorf("down from 3 with a forgotten run: exit %d, %q", code, errOut)
	}
	if v := version(); v != "3" {
		t.Errorf("version after a refused down: %s, want 3", v)
	}
	if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath, "--force"); code != exitOK {
		t.Fatalf("down --force: exit %d, %s", code, errOut)
	}
	code, _, errOut = runOutbox(t, "migrate", "down", "--db", dbPath)
	if code != exitUsage || !strings.Contains(errOut, "the once keys of 1 event not yet projected") || !strings.Contains(errOut, "--force") {
		t.Errorf("down from 2 with a pending once key: exit %d, %q", code, errOut)
	}
	if v := version(); v != "2" {
		t.Errorf("version after a refused down: %s, want 2", v)
	}
	if code, _, errOut := runOutbox(t, "migrate", "down", "--db", dbPath, "--force"); code != exitOK {
		t.Fatalf("down --force: exit %d, %s", code, errOut)
	}
	code, _, errOut = runOutbox(t, "migrate", "down", "--db", dbPath)
	if code != exitUsage || !strings.Contains(errOut, "would drop 4 stored events, 1 of them a once key in the ledger") {
		t.Errorf("down from 1 with events stored: exit %d, %q", code, errOut)
	}
	if v := version(); v != "1" {
		t.Errorf("version after a refused down: %s, want 1", v)
	}
	// A step that loses nothing needs no --force.
	empty := filepath.Join(t.TempDir(), "empty.db")
	runOutbox(t, "migrate", "up", "--db", empty)
	for range 3 {
		if code, _, errOut := runOutbox(t, "migrate", "down", "--db", empty); code != exitOK {
			t.Errorf("down on an empty book: exit %d, %s", code, errOut)
		}
	}
}

var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })

func TestMigrateStatusListsVersionsItDoesNotKnow(t *testing.T) {
	dbPath := emptyBook(t)
	u := url.URL{Scheme: "file", OmitHost: true, Path: dbPath}
	d, err := sql.Open("sqlite3", u.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO outbox_db_version (version_id, is_applied) VALUES (10, 1)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	code, out, errOut := runOutbox(t, "migrate", "status", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, "00010 (unknown to this outbox)") || strings.Count(out, "applied") != len(migrations.Known())+1 {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	if _, out, _ := runOutbox(t, "migrate", "version", "--db", dbPath); strings.TrimSpace(out) != "10" {
		t.Errorf("version: %q, want 10", out)
	}
	for _, action := range []string{"up", "down"} {
		code, out, errOut := runOutbox(t, "migrate", action, "--db", dbPath, "--force")
		if code != exitUsage || out != "" || !strings.Contains(errOut, "version 10, which this release does not know") {
			t.Errorf("%s on a book of an unknown version: exit %d, %q %q", action, code, out, errOut)
		}
	}
}

func TestRelayRefusesAJournalThatLacksARunWhoseRowsAreAllForgotten(t *testing.T) {
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
	for i := range 3 {
		if _, err := s.EnqueueEvent(ctx, "old", journal.Builder("old", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	relay, err := outbox.NewRelay(s, j, "old", outbox.WithForgetProjected(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	s.Close()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", empty)
	if want := "holds run old up to seq 0, but the database records it projected up to seq 3"; code != exitUsage || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("relay into an empty file: exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
	}
}
