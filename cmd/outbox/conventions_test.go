// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/outbox"
)

func TestEveryCommandPrefixesItsErrorsWithItsName(t *testing.T) {
	dbPath, jPath := book(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	demoDir := filepath.Join(dir, "demo")
	os.MkdirAll(demoDir, 0o755)
	os.WriteFile(filepath.Join(demoDir, "book.db"), nil, 0o644)
	locked, err := outbox.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer locked.Close()
	for _, args := range [][]string{
		{"stats", "--db", missing},
		{"pending", "--db", missing, "--run", "r"},
		{"pending", "--db", dbPath, "--run", "nobody"},
		{"relay", "--db", dbPath, "--journal", jPath},
		{"retire", "--db", dbPath, "--run", "dead", "--seq", "2", "--reason", "x"},
		{"verify", missing},
		{"migrate", "status", "--db", missing},
		{"inbox", "stats", "--db", missing},
		{"stream", "create", "--nats", "nats://127.0.0.1:1", "--stream", "S"},
		{"demo", "--dir", demoDir},
		{"version", "extra"},
		{"stats", "--bogus"},
	} {
		code, _, errOut := cli(t, args...)
		if code == exitOK || !strings.HasPrefix(errOut, "outbox "+args[0]+": ") && !strings.HasPrefix(errOut, "outbox "+args[0]+" ") {
			t.Errorf("%v: exit %d, stderr %q: want it to start with %q", args, code, errOut, "outbox "+args[0])
		}
		if strings.HasPrefix(errOut, "outbox: ") {
			t.Errorf("%v: %q names no command", args, errOut)
		}
	}
}

func TestBareOutboxIsAOneLineUsageError(t *testing.T) {
	code, out, errOut := cli(t)
	if code != exitUsage || out != "" || errOut != "outbox: need a command (run 'outbox help' for the list)\n" {
		t.Errorf("outbox: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCountsAgreeInNumber(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 once keys"}, {1, "1 once key"}, {2, "2 once keys"}} {
		if got := plural(tc.n, "once key"); got != tc.want {
			t.Errorf("plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	// One run of one line, through relay, verify and stats.
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnqueueOnce(context.Background(), "r", "k", func(seq int64) ([]byte, error) {
		return []byte(`{"engine_run_id":"r","seq":1}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK || !strings.Contains(out, "projected 1 line of 1 run into ") {
		t.Errorf("relay: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "verify", jPath); code != exitOK || !strings.Contains(out, "1 run, 1 unique line, 1 in all, 0 duplicates skipped") {
		t.Errorf("verify: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "stats", "--db", dbPath); code != exitOK || !strings.Contains(out, "; 1 once key in the ledger; 1 run\n") {
		t.Errorf("stats: %d %q %q", code, out, errOut)
	}
}

func TestNotYetProjectedIsPendingInTheTableTheJSONAndRunStats(t *testing.T) {
	dbPath, _ := book(t) // "dead": 3 lines pending
	s, err := outbox.OpenReadOnly(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := collect(s.AllRuns(context.Background()))
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	var lib int64
	for _, r := range runs {
		if r.RunID == "dead" {
			lib = r.Pending
		}
	}
	_, out, _ := cli(t, "stats", "--db", dbPath, "--json")
	var rep map[string]any
	json.Unmarshal([]byte(out), &rep)
	var jsonPending any
	for _, r := range rep["runs"].([]any) {
		if row := r.(map[string]any); row["run"] == "dead" {
			jsonPending = row["pending"]
		}
	}
	_, text, _ := cli(t, "stats", "--db", dbPath)
	if lib != 3 || jsonPending != 3.0 || !strings.Contains(text, "  pending  oldest pending") {
		t.Errorf("RunStats.Pending %d, JSON pending %v, table:\n%s", lib, jsonPending, text)
	}
}
