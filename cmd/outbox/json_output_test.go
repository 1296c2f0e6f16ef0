// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestJSONOutputEscapesRunesATerminalActsOnAndStaysExact(t *testing.T) {
	dbPath := emptyBook(t)
	now := time.Now().UnixMilli()
	insertRows(t, dbPath,
		[]any{bidiRun, 1, []byte(`{"seq":1}`), "", now},
		[]any{c1Run, 1, []byte(`{"seq":1}`), "", now},
	)
	jPath := filepath.Join(t.TempDir(), "j.jsonl")
	var j strings.Builder
	for _, run := range []string{bidiRun, c1Run, "iso\u2066x\u200b"} {
		j.WriteString(jline(run, 1, "\u202e"))
	}
	if err := os.WriteFile(jPath, []byte(j.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	_, out, _ := runOutbox(t, "stats", "--db", dbPath, "--json")
	checkNothingATerminalActsOn(t, "stats --json", out)
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	var ids []string
	for _, r := range rep.Runs {
		ids = append(ids, r.RunID)
	}
	if got := strings.Join(ids, "|"); got != bidiRun+"|"+c1Run {
		t.Errorf("stats --json runs %q, want the exact ids", got)
	}

	_, out, _ = runOutbox(t, "verify", "--json", jPath)
	checkNothingATerminalActsOn(t, "verify --json", out)
	var vrep verifyReport
	if err := json.Unmarshal([]byte(out), &vrep); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if _, ok := vrep.Runs[bidiRun]; !ok || len(vrep.Runs) != 3 {
		t.Errorf("verify --json runs %v, want the exact ids", vrep.Runs)
	}

	_, out, _ = runOutbox(t, "check", "--db", dbPath, "--journal", jPath, "--json")
	checkNothingATerminalActsOn(t, "check --json", out)
	var crep checkReport
	if err := json.Unmarshal([]byte(out), &crep); err != nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"stats", "--db", dbPath},
		{"verify", jPath},
		{"check", "--db", dbPath, "--journal", jPath},
		{"pending", "--db", dbPath, "--run", bidiRun},
	} {
		_, out, errOut := runOutbox(t, args...)
		checkNothingATerminalActsOn(t, strings.Join(args, " ")+" (stdout)", out)
		checkNothingATerminalActsOn(t, strings.Join(args, " ")+" (stderr)", errOut)
	}
}

// Paths are bytes: two that differ only in bytes that are not UTF-8 both come out of JSON as
// U+FFFD, so the reports give each such path escaped beside it, as they do run ids.
func TestJSONGivesAPathThatIsNotUTF8EscapedBesideIt(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	dir := t.TempDir()
	badDB, badJ := filepath.Join(dir, "b\xff.db"), filepath.Join(dir, "j\xfe.jsonl")
	for from, to := range map[string]string{dbPath: badDB, jPath: badJ} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	consumer, _ := consumerDB(t)
	badConsumer := filepath.Join(dir, "c\xfd.db")
	if err := os.Rename(consumer, badConsumer); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want map[string]string
	}{
		{[]string{"stats", "--json", "--db", badDB}, map[string]string{"db_escaped": strconv.Quote(badDB)}},
		{[]string{"verify", "--json", badJ}, map[string]string{"file_escaped": strconv.Quote(badJ)}},
		{[]string{"check", "--json", "--db", badDB, "--journal", badJ},
			map[string]string{"db_escaped": strconv.Quote(badDB), "journal_escaped": strconv.Quote(badJ)}},
		{[]string{"inbox", "stats", "--json", "--db", badConsumer}, map[string]string{"db_escaped": strconv.Quote(badConsumer)}},
		{[]string{"inbox", "quarantined", "--json", "--db", badConsumer}, map[string]string{"db_escaped": strconv.Quote(badConsumer)}},
	} {
		_, out, errOut := cli(t, tc.args...)
		var rep map[string]any
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%q: %v\n%s%s", tc.args, err, out, errOut)
		}
		for k, v := range tc.want {
			if rep[k] != v {
				t.Errorf("%q: %s is %v, want %s", tc.args, k, rep[k], v)
			}
		}
	}
	// A valid path has no such member.
	_, out, _ := cli(t, "stats", "--json", "--db", dbPath)
	if strings.Contains(out, "_escaped") {
		t.Errorf("stats --json of a UTF-8 path:\n%s", out)
	}
}
