package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Run ids a terminal obeys without a control byte in them: a bidi override that reorders what
// follows, an isolate, a zero-width space, and a C1 control (U+009B is CSI on terminals that take
// 8-bit controls).
const (
	bidiRun = "bidi\u202egnp.exe"
	c1Run   = "c1\u009b2Jcsi"
)

// checkNothingATerminalActsOn fails when out holds a rune a terminal would act on or hide: any
// rune but newline that strconv.IsPrint refuses (control bytes, DEL, C1 controls, bidi overrides
// and isolates, zero-width and other formatting runes), or invalid UTF-8.
func checkNothingATerminalActsOn(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8 in %q", what, out)
		return
	}
	for _, r := range out {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("%s: raw %U in %q", what, r, out)
			return
		}
	}
}

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
