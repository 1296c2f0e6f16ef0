// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/inbox"
	imigrations "github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/flock"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

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
