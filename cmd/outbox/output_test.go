// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTextOutputIsTerminalSafe(t *testing.T) {
	const evil = "evil\x1b[2J\x07"
	dbPath := emptyBook(t)
	now := time.Now().UnixMilli()
	insertRows(t, dbPath,
		[]any{evil, 1, []byte(`{"engine_run_id":"evil\u001b[2J\u0007","seq":1}`), "key\x1b]0;owned\x07", now},
		[]any{"plain", 1, []byte("{\"seq\":1,\"msg\":\"\x1b[31mred\x7f\"}"), "", now},
		[]any{"bad\xff", 1, []byte(`{"seq":1}`), "", now},
		[]any{"bad\xfe", 1, []byte(`{"seq":1}`), "", now},
		[]any{"fake\n run  99", 1, []byte(`{"seq":1}`), "", now},
	)
	jPath := filepath.Join(t.TempDir(), "j.jsonl")
	os.WriteFile(jPath, []byte(`{"engine_run_id":"evil\u001b[2J\u0007","seq":1}`+"\n"+`{"engine_run_id":"evil\u001b[2J\u0007","seq":3}`+"\n"), 0o644)

	for _, args := range [][]string{
		{"stats", "--db", dbPath},
		{"pending", "--db", dbPath, "--run", evil},
		{"pending", "--db", dbPath, "--run", "plain"},
		{"pending", "--db", dbPath, "--run", "bad\xff"},
		{"verify", jPath},
		{"stats", "--db", filepath.Join(t.TempDir(), evil)},
		{"pending", "--db", dbPath, "--run", evil, "--limit", "\x1b[2J"},
		{"frobnicate\x1b[2J"},
	} {
		_, out, errOut := runOutbox(t, args...)
		checkTerminalSafe(t, strings.Join(args, " ")+" (stdout)", out)
		checkTerminalSafe(t, strings.Join(args, " ")+" (stderr)", errOut)
	}
	_, out, _ := runOutbox(t, "stats", "--db", dbPath)
	for _, want := range []string{`"evil\x1b[2J\a"`, `"bad\xff"`, `"bad\xfe"`, `"fake\n run  99"`} {
		if !strings.Contains(out, want) {
			t.Errorf("stats does not show %s escaped:\n%s", want, out)
		}
	}
	_, out, _ = runOutbox(t, "verify", jPath)
	if !strings.Contains(out, `"evil\x1b[2J\a"`) {
		t.Errorf("verify does not show the run escaped:\n%s", out)
	}
	// --raw is byte for byte.
	if _, out, _ := runOutbox(t, "pending", "--db", dbPath, "--run", "plain"); !strings.Contains(out, `\x1b[31mred\x7f`) {
		t.Errorf("pending does not show the line escaped: %q", out)
	}
	if _, out, _ := runOutbox(t, "pending", "--db", dbPath, "--run", "plain", "--raw"); !strings.Contains(out, "\x1b[31mred\x7f") {
		t.Errorf("pending --raw changed the line: %q", out)
	}

	// --json stays exact.
	_, out, _ = runOutbox(t, "stats", "--db", dbPath, "--json")
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	var ids []string
	for _, r := range rep.Runs {
		ids = append(ids, r.RunID)
	}
	if !strings.Contains(strings.Join(ids, "|"), evil) {
		t.Errorf("stats --json lost the run id's bytes: %q", ids)
	}
	escaped := map[string]bool{}
	for _, r := range rep.Runs {
		escaped[r.RunEscaped] = true
	}
	if !escaped[`"bad\xff"`] || !escaped[`"bad\xfe"`] {
		t.Errorf("stats --json does not tell the two invalid UTF-8 run ids apart: %+v", rep.Runs)
	}
	_, out, _ = runOutbox(t, "verify", "--json", jPath)
	var vrep verifyReport
	if err := json.Unmarshal([]byte(out), &vrep); err != nil || vrep.Finding == nil || vrep.Finding.Run != evil {
		t.Errorf("verify --json: %v %+v", err, vrep.Finding)
	}
}

func TestHelpAndErrorsFollowTheConventions(t *testing.T) {
	singleDash := regexp.MustCompile(`(^|[\s\[(|])-[a-z]`)
	for name := range commands {
		code, out, errOut := runOutbox(t, name, "--help")
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: outbox "+name) {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", name, code, out, errOut)
		}
		synopsis, flags, _ := strings.Cut(out, "\nflags:\n")
		synopsis, _, _ = strings.Cut(synopsis, "\n")
		if m := singleDash.FindString(synopsis); m != "" {
			t.Errorf("%s --help shows a flag as %q, not --name:\n%s", name, m, out)
		}
		for _, l := range strings.Split(flags, "\n") {
			if f := strings.TrimSpace(l); strings.HasPrefix(f, "-") && !strings.HasPrefix(f, "--") {
				t.Errorf("%s --help lists a flag as %q, not --name", name, f)
			}
		}
		if strings.Contains(out, "--db FILE") != strings.Contains(out, "--db") {
			t.Errorf("%s --help: --db without its FILE placeholder:\n%s", name, out)
		}
	}
	if code, out, _ := runOutbox(t, "help"); code != exitOK || !strings.Contains(out, "verify") {
		t.Errorf("help: %d %q", code, out)
	}
	if code, out, errOut := runOutbox(t); code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "'outbox help'") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runOutbox(t, args...)
		if code != exitOK || !regexp.MustCompile(`(?m)^outbox \S+.*\ngo go1\.\d+.*\nsqlite 3\.\d+\.\d+\n$`).MatchString(out) {
			t.Errorf("%v: exit %d, %q; want the module, Go and SQLite versions", args, code, out)
		}
	}
	for _, args := range [][]string{
		{"frobnicate"}, {"stats", "--nope"}, {"stats"}, {"verify"}, {"pending", "--db", "x"},
		{"migrate", "sideways", "--db", "x"}, {"pending", "--limit", "many"}, {"stats", "--db", "x", "--watch", "-1s"},
		{"metrics", "--db", "x", "extra"}, {"version", "extra"},
	} {
		code, out, errOut := runOutbox(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line on stderr", args, code, out, errOut)
		}
		if strings.Contains(errOut, " -nope") {
			t.Errorf("%v: %q names the flag with one dash", args, errOut)
		}
	}

	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("not a database\n"), 0o644)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"stats", "--db", dir}, "is a directory"},
		{[]string{"pending", "--db", dir, "--run", "r"}, "is a directory"},
		{[]string{"migrate", "status", "--db", dir}, "is a directory"},
		{[]string{"relay", "--db", dir, "--journal", text}, "is a directory"},
		{[]string{"metrics", "--db", dir, "--listen", "127.0.0.1:0"}, "is a directory"},
		{[]string{"stats", "--db", filepath.Join(dir, "missing.db")}, "does not exist"},
		{[]string{"stats", "--db", text}, "not a database"},
		{[]string{"migrate", "version", "--db", text}, "not a database"},
	} {
		code, _, errOut := runOutbox(t, tc.args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, %q; want 2 and one line saying %q", tc.args, code, errOut, tc.says)
		}
		if strings.Count(errOut, "outbox") != 1 || strings.Count(errOut, tc.args[2]) > 1 {
			t.Errorf("%v: %q says a thing twice", tc.args, errOut)
		}
	}
}

func TestScriptsGetAnAnswerEveryTime(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	clean := write("clean", `{"engine_run_id":"a","seq":1}`+"\n")
	gap := write("gap", `{"engine_run_id":"a","seq":1}`+"\n"+`{"engine_run_id":"a","seq":3}`+"\n")
	for _, tc := range []struct {
		name, path string
		code       int
		verdict    string
		hasError   bool
	}{
		{"a clean journal", clean, exitOK, "OK", false},
		{"a journal with a gap", gap, exitFindings, "FAILED: line 2: stream gap", false},
		{"a missing file", filepath.Join(dir, "missing"), exitUsage, "FAILED: journal", true},
		{"a directory that holds no segment", dir, exitUsage, "FAILED: not a journal", true},
	} {
		code, out, _ := runOutbox(t, "verify", "--json", tc.path)
		dec := json.NewDecoder(strings.NewReader(out))
		var rep map[string]any
		if err := dec.Decode(&rep); err != nil {
			t.Errorf("%s: verify --json printed no JSON object: %v\n%s", tc.name, err, out)
			continue
		}
		if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
			t.Errorf("%s: verify --json printed more than one JSON value:\n%s", tc.name, out)
		}
		if _, has := rep["error"]; code != tc.code || has != tc.hasError || rep["ok"] != (tc.code == exitOK) {
			t.Errorf("%s: --json exit %d, %v; want exit %d, error member %v", tc.name, code, rep, tc.code, tc.hasError)
		}
		code, out, _ = runOutbox(t, "verify", tc.path)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if last := lines[len(lines)-1]; code != tc.code || !strings.HasPrefix(last, tc.verdict) {
			t.Errorf("%s: text verify: exit %d, last line %q; want %d and %q", tc.name, code, last, tc.code, tc.verdict)
		}
	}
	if !bytes.HasSuffix([]byte(func() string { _, o, _ := runOutbox(t, "verify", clean); return o }()), []byte("\nOK\n")) {
		t.Error("a clean verify does not end with OK")
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
