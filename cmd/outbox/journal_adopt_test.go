// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
)

func TestJournalAdoptCarriesTheFileOverAndTheJournalGoesOn(t *testing.T) {
	_, jPath := book(t)
	content, _ := os.ReadFile(jPath)
	dir := filepath.Join(t.TempDir(), "journal")
	code, out, errOut := cli(t, "journal", "adopt", jPath, dir)
	if code != exitOK || errOut != "" || !strings.Contains(out, "adopted") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.jsonl")); err != nil || string(b) != string(content) {
		t.Fatalf("the first segment is not the file: %v", err)
	}
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if last, err := j.LastSeqContext(context.Background(), "old"); err != nil || last != 2 {
		t.Fatalf("LastSeq(old) = %d, %v; want 2", last, err)
	}
}

func TestJournalAdoptRefusesADirectoryThatHoldsSegments(t *testing.T) {
	_, jPath := book(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "00000000000000000000.jsonl"), nil, 0o644)
	code, _, errOut := cli(t, "journal", "adopt", jPath, dir)
	if code != exitUsage || !strings.HasPrefix(errOut, "outbox journal adopt: ") || !strings.Contains(errOut, "not empty") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(jPath); err != nil {
		t.Fatalf("the refused adopt moved the file: %v", err)
	}
}

func TestJournalAdoptRefusesAJournalTheEngineHasOpen(t *testing.T) {
	_, jPath := book(t)
	f, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := filepath.Join(t.TempDir(), "journal")
	code, _, errOut := cli(t, "journal", "adopt", jPath, dir)
	if code != exitUsage || !strings.Contains(errOut, "is the engine running?") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused adopt left %s: %v", dir, err)
	}
}

func TestJournalWithoutASubcommandIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"journal"}, {"journal", "adopt", "f"}, {"journal", "bogus"}} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage || !strings.HasPrefix(errOut, "outbox journal: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
