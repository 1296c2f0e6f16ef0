// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"strings"
	"testing"
)

func TestVerifyRefusesADatabaseNamedForTheJournalAsCheckDoes(t *testing.T) {
	dbPath, jPath := book(t)
	code, out, errOut := cli(t, "verify", dbPath)
	if code != exitUsage || !strings.Contains(errOut, "not a journal file") {
		t.Fatalf("verify of a database: exit %d, stdout %q, stderr %q; want exit %d, \"not a journal file\"", code, out, errOut, exitUsage)
	}
	if code, _, errOut := cli(t, "check", "--db", dbPath, "--journal", dbPath); code != exitUsage || !strings.Contains(errOut, "not a journal file") {
		t.Fatalf("check of a database: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = cli(t, "verify", "--json", dbPath)
	if code != exitUsage || !strings.Contains(out, `"finding": null`) || !strings.Contains(out, "not a journal file") {
		t.Fatalf("verify --json of a database: exit %d, stdout %q", code, out)
	}
	// The journal itself, by path and on standard input, still verifies.
	if code, out, errOut := cli(t, "verify", jPath); code != exitOK {
		t.Fatalf("verify of the journal: exit %d, %s %s", code, out, errOut)
	}
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := outboxCmd(t, "verify", "-")
	cmd.Stdin = f
	if code, out, errOut := runCmd(t, cmd); code != exitOK || !strings.Contains(out, "OK") {
		t.Fatalf("verify - of the journal: exit %d, %s %s", code, out, errOut)
	}
}
