// SPDX-License-Identifier: Apache-2.0

package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

func TestVacuumRewritesABookAndRefusesWhatIsNotOne(t *testing.T) {
	dbPath, _ := checkedBook(t)
	code, out, errOut := cli(t, "vacuum", "--db", dbPath)
	if code != exitOK || !strings.HasPrefix(out, "vacuumed ") || errOut != "" {
		t.Fatalf("vacuum: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", filepath.Join(filepath.Dir(dbPath), "journal.jsonl")); code != exitOK {
		t.Errorf("check after vacuum: exit %d\n%s%s", code, out, errOut)
	}
	missing := filepath.Join(t.TempDir(), "missing.db")
	if code, _, errOut := cli(t, "vacuum", "--db", missing); code != exitUsage || !strings.HasPrefix(errOut, "outbox vacuum: ") {
		t.Errorf("vacuum of a missing book: exit %d, %q", code, errOut)
	}
}

func TestCheckComparesNothingOfALedgerLineWhoseDigestARollbackDropped(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	// Each engine's once key is a ledger row that keeps its line's digest: rolled back, each keeps
	// neither line nor digest, and of the six lines check compared, four are left.
	for range 3 { // 9, 8 and 7, which lose nothing
		if code, _, errOut := cli(t, "migrate", "down", "--db", dbPath); code != exitOK {
			t.Fatalf("down: exit %d, %s", code, errOut)
		}
	}
	if code, _, errOut := cli(t, "migrate", "down", "--db", dbPath, "--force"); code != exitOK {
		t.Fatalf("down: exit %d, %s", code, errOut)
	}
	if code, _, errOut := cli(t, "migrate", "up", "--db", dbPath); code != exitOK {
		t.Fatalf("up: exit %d, %s", code, errOut)
	}
	code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jPath)
	if code != exitOK || !strings.Contains(out, "4 stored lines compared") {
		t.Errorf("check: exit %d\n%s%s", code, out, errOut)
	}
}

func TestABookTheCommandCreatesGivesItsFreePagesBack(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "book.db")
	if code, _, errOut := cli(t, "migrate", "up", "--db", dbPath); code != exitOK {
		t.Fatalf("up: exit %d, %s", code, errOut)
	}
	d, err := sql.Open("sqlite3", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var mode int
	if err := d.QueryRow("PRAGMA auto_vacuum").Scan(&mode); err != nil || mode != 2 {
		t.Errorf("auto_vacuum of a book migrate up created: %d, %v; want 2 (incremental)", mode, err)
	}
}
