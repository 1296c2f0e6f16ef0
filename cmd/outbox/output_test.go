// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// insertRows writes rows into a book behind the library's back, as an older version or another
// program could have: the library itself refuses such run ids and keys.
func insertRows(t *testing.T, dbPath string, rows ...[]any) {
	t.Helper()
	u := url.URL{Scheme: "file", OmitHost: true, Path: dbPath}
	d, err := sql.Open("sqlite3", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, r := range rows {
		if _, err := d.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line, announce_key, enqueued_at) VALUES (?, ?, ?, ?, ?)`, r...); err != nil {
			t.Fatal(err)
		}
	}
}

func emptyBook(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return path
}

// checkTerminalSafe fails when out holds a byte that a terminal would act on: a control byte other
// than newline, DEL, or invalid UTF-8.
func checkTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8 in %q", what, out)
	}
	for _, r := range out {
		if (r < 0x20 && r != '\n') || r == 0x7f {
			t.Errorf("%s: raw control character %U in %q", what, r, out)
			return
		}
	}
}

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

func TestStatsSaysWhatItMeans(t *testing.T) {
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
	s.EnqueueEvent(ctx, "gone", journal.Builder("gone", "x", 1))
	s.EnqueueOnce(ctx, "gone", "unit:0", journal.Builder("gone", "unit_done", 0)) // a ledger row, kept
	s.EnqueueEvent(ctx, "gone", journal.Builder("gone", "x", 3))
	s.EnqueueEvent(ctx, "live", journal.Handshake("live", nil))
	s.EnqueueOnce(ctx, "live", "unit:1", journal.Builder("live", "unit_done", 1))
	for _, run := range []string{"gone", "live"} {
		relay, err := outbox.NewRelay(s, j, run, outbox.WithForgetProjected(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ForgetEvents(ctx, "live"); err != nil { // drops run gone's rows but its ledger row
		t.Fatal(err)
	}
	s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", 3))
	s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", 4))
	j.Close()
	defer s.Close() // the engine stays open: the WAL has a size

	// A line enqueued under a clock that has since stepped back an hour.
	insertRows(t, dbPath, []any{"skewed", 1, []byte(`{"seq":1}`), "", time.Now().Add(time.Hour).UnixMilli()})

	code, out, errOut := runOutbox(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats: %d %s", code, errOut)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	type row struct{ Last, Lines, Projected, Pending int64 }
	got := map[string]row{}
	for _, r := range rep.Runs {
		got[r.RunID] = row{r.LastSeq, r.Lines, r.Projected, r.Pending}
		if r.OldestAge != nil && *r.OldestAge < 0 {
			t.Errorf("run %s: oldest age %v, negative", r.RunID, *r.OldestAge)
		}
		if (r.Pending > 0) != (r.OldestAge != nil) {
			t.Errorf("run %s: %d not yet projected, oldest age %v", r.RunID, r.Pending, r.OldestAge)
		}
	}
	want := map[string]row{
		"gone":   {Last: 3, Lines: 1, Projected: 3, Pending: 0}, // the highest seq ever given, not the highest stored
		"live":   {Last: 4, Lines: 4, Projected: 2, Pending: 2},
		"skewed": {Last: 1, Lines: 1, Projected: 0, Pending: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	if rep.Ledger != 2 || rep.FileBytes == 0 || rep.WALBytes == 0 {
		t.Errorf("ledger %d, file %d bytes, WAL %d bytes; want 2 keys and both sizes", rep.Ledger, rep.FileBytes, rep.WALBytes)
	}
	_, out, _ = runOutbox(t, "stats", "--db", dbPath)
	for _, h := range []string{"highest seq", "lines stored", "projected up to", "pending", "oldest pending", "WAL"} {
		if !strings.Contains(out, h) {
			t.Errorf("stats text lacks %q:\n%s", h, out)
		}
	}
}

func TestPendingShowsTheLinesNotYetProjectedByDefaultAndEveryStoredLineWithAll(t *testing.T) {
	dbPath, _ := book(t) // run "old": 2 lines, projected; run "dead": 3 lines, none projected
	count := func(args ...string) int {
		t.Helper()
		code, out, errOut := runOutbox(t, append([]string{"pending", "--db", dbPath}, args...)...)
		if code != exitOK {
			t.Fatalf("%v: %d %s", args, code, errOut)
		}
		return strings.Count(out, "\n")
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--run", "old"}, 0},
		{[]string{"--run", "old", "--all"}, 2},
		{[]string{"--run", "old", "--all", "--after", "1"}, 1},
		{[]string{"--run", "dead"}, 3},
		{[]string{"--run", "dead", "--after", "2"}, 1},
		{[]string{"--run", "dead", "--limit", "2"}, 2},
	} {
		if got := count(tc.args...); got != tc.want {
			t.Errorf("pending %v: %d lines, want %d", tc.args, got, tc.want)
		}
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

// TestStatsPrintsABookOfMoreRunsThanAPageWholeAndAsOneJSONDocument: stats prints a page of runs at a
// time; every run of a book of several pages is printed once, in order, in one valid document, and
// the stopped runs are named after the table.
func TestStatsPrintsABookOfMoreRunsThanAPageWholeAndAsOneJSONDocument(t *testing.T) {
	dbPath := emptyBook(t)
	d, err := sql.Open("sqlite3", (&url.URL{Scheme: "file", OmitHost: true, Path: dbPath}).String())
	if err != nil {
		t.Fatal(err)
	}
	runs := 2*statsPage + 7
	if _, err := d.Exec(`WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM r WHERE n < ? - 1)
		INSERT INTO events_outbox (engine_run_id, seq, line) SELECT printf('run-%05d', n), 1, '{}' FROM r`, runs); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`INSERT INTO outbox_stops (engine_run_id, seq, reason, stopped_at) VALUES ('run-00600', 1, 'refused', 0)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	code, out, errOut := runOutbox(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats --json: %d %s", code, errOut)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json is not one document: %v\n%.300s", err, out)
	}
	if len(rep.Runs) != runs || rep.Runs[0].RunID != "run-00000" || rep.Runs[runs-1].RunID != fmt.Sprintf("run-%05d", runs-1) {
		t.Fatalf("stats --json listed %d runs, want %d in order", len(rep.Runs), runs)
	}
	if rep.Runs[600].Stopped == nil || rep.Runs[601].Stopped != nil {
		t.Errorf("the stopped run is not marked alone: %+v %+v", rep.Runs[600], rep.Runs[601])
	}
	code, out, errOut = runOutbox(t, "stats", "--db", dbPath)
	if code != exitOK {
		t.Fatalf("stats: %d %s", code, errOut)
	}
	if n := strings.Count(out, "run-0"); n != runs+1 || !strings.Contains(out, fmt.Sprintf("%d runs", runs)) ||
		!strings.Contains(out, "run run-00600 stopped at seq 1") {
		t.Errorf("stats names runs %d times, want each once and the stopped one again; header and end:\n%.300s\n…\n%s", n, out, out[max(0, len(out)-300):])
	}
}
