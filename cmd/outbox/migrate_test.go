// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3/driver"
	"github.com/textmachine/outbox/inbox"
	imigrations "github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/flock"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
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
	for _, from := range []string{"10, the figures' tails folded into their rows", "9, the mark of the sink the next start does without", "8, the runs' marks the figures rebuild", "7, the figures' counting handed back to the triggers", "6, no ledger line emptied", "5, figures the rows rebuild", "4, no run stopped", "3, nothing forgotten"} {
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
	// Version 10 folds the figures' tails into their rows, version 9 drops the book's mark of its
	// sink (the next start compares every run), version 8 marks the runs recovery visits, which the
	// figures show, and version 7 hands the figures' counting back to the triggers: none loses
	// anything.
	for _, from := range []string{"10", "9", "8", "7"} {
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

// migrate up on the platform's database (the wrong file of the two) would add the outbox's tables
// to it, after which the inbox refuses it as a book: the consumer could not start again.
func TestMigrateRefusesAConsumersDatabaseAndChangesNothing(t *testing.T) {
	consumer, _ := consumerDB(t)
	before := fileDigest(t, consumer)
	for _, action := range []string{"up", "down"} {
		code, out, errOut := cli(t, "migrate", action, "--db", consumer)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "consumer's database") {
			t.Errorf("migrate %s: exit %d, stdout %q, stderr %q; want exit 2 naming a consumer's database", action, code, out, errOut)
		}
	}
	if fileDigest(t, consumer) != before {
		t.Errorf("the consumer's database was changed")
	}
	if code, _, errOut := cli(t, "inbox", "stats", "--db", consumer); code != exitOK {
		t.Errorf("inbox stats afterwards: exit %d, %s", code, errOut)
	}
}

// migrate status and version on the platform's database do not report it as a book with every
// migration pending (which sends the operator to migrate up, which refuses it): they name it a
// consumer's database, exit 2, and change nothing.
func TestMigrateStatusAndVersionNameAConsumersDatabaseAsOne(t *testing.T) {
	consumer, _ := consumerDB(t)
	before := fileDigest(t, consumer)
	for _, action := range []string{"status", "version"} {
		code, out, errOut := cli(t, "migrate", action, "--db", consumer)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "consumer's database") {
			t.Errorf("migrate %s: exit %d, stdout %q, stderr %q; want exit 2 naming a consumer's database", action, code, out, errOut)
		}
	}
	if fileDigest(t, consumer) != before {
		t.Errorf("the consumer's database was changed")
	}
}

func TestMigrateUpBesideARunningEngineWithNothingToApplySaysSoAndSucceeds(t *testing.T) {
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, out, errOut := cli(t, "migrate", "up", "--db", dbPath)
	latest := migrations.Known()[len(migrations.Known())-1]
	if code != exitOK || errOut != "" || !strings.HasPrefix(out, "nothing to apply: the database is at version "+strconv.FormatInt(latest, 10)) ||
		!strings.Contains(out, "a running engine has it open") {
		t.Errorf("up beside an engine, nothing to apply: exit %d, %q %q", code, out, errOut)
	}
	// down still refuses: it has something to do and the engine is in the way.
	if code, _, errOut := cli(t, "migrate", "down", "--db", dbPath, "--force"); code != exitUsage || !strings.Contains(errOut, "held by a running engine") {
		t.Errorf("down beside an engine: exit %d, %q", code, errOut)
	}
}

func TestMigrateUpBesideARunningEngineWithSomethingToApplyStillRefuses(t *testing.T) {
	dbPath, _ := book(t)
	if code, _, errOut := cli(t, "migrate", "down", "--db", dbPath); code != exitOK {
		t.Fatalf("down: %d %s", code, errOut)
	}
	// As an engine holds it: the writer lock on its own descriptor.
	f, err := os.OpenFile(dbPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := flock.Exclusive(f); err != nil {
		t.Fatal(err)
	}
	defer flock.Release(f)
	code, out, errOut := cli(t, "migrate", "up", "--db", dbPath)
	if code != exitUsage || out != "" || !strings.Contains(errOut, "held by a running engine") {
		t.Errorf("up beside an engine with a migration pending: exit %d, %q %q", code, out, errOut)
	}
}

func TestMigrateUpWithNothingToApplySaysNothingToApply(t *testing.T) {
	dbPath, _ := book(t)
	code, out, errOut := cli(t, "migrate", "up", "--db", dbPath)
	if code != exitOK || !strings.HasPrefix(out, "nothing to apply: the database is at version ") {
		t.Errorf("up with nothing to apply: exit %d, %q %q", code, out, errOut)
	}
}

// appendPrinted runs the statements migrate sql printed, its two commented bookkeeping statements
// included, as a team's own migration tool would.
func applyPrinted(t *testing.T, d *sql.DB, printed string) {
	t.Helper()
	var book strings.Builder
	// The version table's statements are the header's indented comments, before its blank line; a
	// migration's own comments below it are indented too.
	header, _, _ := strings.Cut(printed, "\n\n")
	for _, l := range strings.Split(header, "\n") {
		if stmt, ok := strings.CutPrefix(l, "--   "); ok {
			book.WriteString(stmt + "\n")
		}
	}
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, sqlText := range []string{printed, book.String()} {
		if _, err := tx.Exec(sqlText); err != nil {
			t.Fatalf("%v in:\n%s", err, sqlText)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateSQLPrintsEachStepForAnotherMigrationTool(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cmd   []string
		known []int64
		open  func(path string) error
	}{
		{[]string{"migrate"}, migrations.Known(), func(path string) error {
			s, err := outbox.Open(ctx, path)
			if err == nil {
				s.Close()
			}
			return err
		}},
		{[]string{"inbox", "migrate"}, inboxKnown(t), func(path string) error {
			in, err := inbox.Open(ctx, path)
			if err == nil {
				in.Close()
			}
			return err
		}},
	} {
		t.Run(strings.Join(c.cmd, " "), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "own-tool.db")
			d, err := driver.Open("file:" + path)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			sqlOf := func(v int64, down bool) string {
				args := append(append([]string{}, c.cmd...), "sql", "--version", strconv.FormatInt(v, 10))
				if down {
					args = append(args, "--down")
				}
				code, out, errOut := cli(t, args...)
				if code != exitOK || errOut != "" || strings.Contains(out, "+goose") {
					t.Fatalf("%v: exit %d, %q %q", args, code, out, errOut)
				}
				return out
			}
			for _, v := range c.known {
				applyPrinted(t, d, sqlOf(v, false))
			}
			// Applied by the team's tool and recorded as goose records it: the library sees the
			// latest version and applies nothing again.
			if err := c.open(path); err != nil {
				t.Fatalf("Open after the printed migrations: %v", err)
			}
			latest := c.known[len(c.known)-1]
			applyPrinted(t, d, sqlOf(latest, true))
			args := append(append([]string{}, c.cmd...), "version", "--db", path)
			if code, out, _ := cli(t, args...); code != exitOK || out != strconv.FormatInt(latest-1, 10)+"\n" {
				t.Errorf("version after the printed rollback of %d: exit %d, %q", latest, code, out)
			}
		})
	}
}

func inboxKnown(t *testing.T) []int64 {
	known, err := knownMigrations(imigrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, m := range known {
		out = append(out, m.version)
	}
	return out
}

func TestMigrateSQLRefusesAnUnknownVersionAndADatabase(t *testing.T) {
	for _, args := range [][]string{
		{"migrate", "sql", "--version", "99"},
		{"migrate", "sql"},
		{"migrate", "sql", "--version", "1", "--db", "x.db"},
		{"migrate", "up", "--db", "x.db", "--version", "1"},
		{"inbox", "migrate", "sql", "--version", "99"},
	} {
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	if _, err := os.Stat("x.db"); err == nil {
		t.Error("x.db was created")
	}
}

func TestMigrateUpStatusVersionDown(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	if code, out, errOut := cli(t, "migrate", "up", "--db", db); code != exitOK || !strings.Contains(out, "applied 00001") {
		t.Fatalf("up: %d %q %q", code, out, errOut)
	}
	known := migrations.Known()
	latest, before := known[len(known)-1], known[len(known)-2]
	if code, out, _ := cli(t, "migrate", "--db", db, "version"); code != exitOK || strings.TrimSpace(out) != fmt.Sprint(latest) {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out, _ := cli(t, "migrate", "status", "--db", db); code != exitOK || strings.Count(out, "applied") != len(known) {
		t.Errorf("status: %d %q", code, out)
	}
	if code, out, _ := cli(t, "migrate", "down", "--db", db); code != exitOK || !strings.Contains(out, fmt.Sprintf("rolled back %05d", latest)) {
		t.Errorf("down: %d %q", code, out)
	}
	if code, out, _ := cli(t, "migrate", "version", "--db", db); code != exitOK || strings.TrimSpace(out) != fmt.Sprint(before) {
		t.Errorf("version after down: %d %q", code, out)
	}
	// The library reads the same version table and brings the schema back up.
	s, err := outbox.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if code, out, _ := cli(t, "migrate", "version", "--db", db); strings.TrimSpace(out) != fmt.Sprint(latest) || code != exitOK {
		t.Errorf("version after Open: %q", out)
	}
	if code, _, _ := cli(t, "migrate", "version", "--db", filepath.Join(t.TempDir(), "missing.db")); code != exitUsage {
		t.Errorf("version of a missing file: exit %d", code)
	}
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
	// Version 10 folds the figures' tails into their rows, version 9 drops the book's mark of its
	// sink (the next start compares every run), version 8 marks the runs recovery visits, which the
	// figures show, and version 7 hands the figures' counting back to the triggers: none loses
	// anything.
	for _, from := range []string{"10", "9", "8", "7"} {
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

func TestMigrateStatusListsVersionsItDoesNotKnow(t *testing.T) {
	dbPath := emptyBook(t)
	u := url.URL{Scheme: "file", OmitHost: true, Path: dbPath}
	d, err := sql.Open("sqlite3", u.String())
	if err != nil {
		t.Fatal(err)
	}
	known := migrations.Known()
	next := known[len(known)-1] + 1 // a version of a later release
	if _, err := d.Exec(`INSERT INTO outbox_db_version (version_id, is_applied) VALUES (?, 1)`, next); err != nil {
		t.Fatal(err)
	}
	d.Close()
	code, out, errOut := runOutbox(t, "migrate", "status", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("%05d (unknown to this outbox)", next)) || strings.Count(out, "applied") != len(migrations.Known())+1 {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	if _, out, _ := runOutbox(t, "migrate", "version", "--db", dbPath); strings.TrimSpace(out) != fmt.Sprint(next) {
		t.Errorf("version: %q, want %d", out, next)
	}
	for _, action := range []string{"up", "down"} {
		code, out, errOut := runOutbox(t, "migrate", action, "--db", dbPath, "--force")
		if code != exitUsage || out != "" || !strings.Contains(errOut, fmt.Sprintf("version %d, which this release does not know", next)) {
			t.Errorf("%s on a book of an unknown version: exit %d, %q %q", action, code, out, errOut)
		}
	}
}
