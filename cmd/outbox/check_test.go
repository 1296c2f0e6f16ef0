// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/dirstate"
	ojs "github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// engineStart is one start of an engine on the book at dbPath projecting into sink: it recovers the
// runs before it (projecting what they left and forgetting their lines but their once keys), begins
// run with a handshake, a once key and a line long enough to be stored apart from its row, projects
// projected lines in all, then enqueues unprojected more and stops.
func engineStart(t *testing.T, dbPath string, sink outbox.Sink, run string, projected, unprojected int) {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	relay, err := outbox.NewRelay(s, sink, run, outbox.WithForgetProjected(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue := func(b outbox.EventBuilder) {
		t.Helper()
		if _, err := s.EnqueueEvent(ctx, run, b); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(journal.Handshake(run, nil))
	if _, _, err := s.EnqueueOnce(ctx, run, "unit:"+run, journal.Builder(run, "unit_done", 1)); err != nil {
		t.Fatal(err)
	}
	enqueue(journal.Builder(run, "large", strings.Repeat("x", 2000)))
	for i := 3; i < projected; i++ {
		enqueue(journal.Builder(run, "tick", i))
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range unprojected {
		enqueue(journal.Builder(run, "late", i))
	}
}

// fileEngineStart is engineStart into the journal file at jPath.
func fileEngineStart(t *testing.T, dbPath, jPath, run string, projected, unprojected int) {
	t.Helper()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	engineStart(t, dbPath, j, run, projected, unprojected)
}

// checkedBook is a book and its journal after two engine starts: engine-1 projected 1..6, its lines
// forgotten but its once key's; engine-2 projected 1..5 and holding 6..7 not yet projected, every
// line still stored.
func checkedBook(t *testing.T) (dbPath, jPath string) {
	t.Helper()
	dir := t.TempDir()
	dbPath, jPath = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	fileEngineStart(t, dbPath, jPath, "engine-1", 5, 1)
	fileEngineStart(t, dbPath, jPath, "engine-2", 5, 2)
	return dbPath, jPath
}

// checkJSON runs check --json with args and returns its exit status and report.
func checkJSON(t *testing.T, args ...string) (int, checkReport) {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"check", "--json"}, args...)...)
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("check --json: %v\n%s\n%s", err, out, errOut)
	}
	return code, rep
}

// rewriteJournal rewrites each line of the journal at jPath with edit.
func rewriteJournal(t *testing.T, jPath string, edit func(run string, seq int64, line string) string) {
	t.Helper()
	b, err := os.ReadFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		run, seq, err := journal.LineKey([]byte(strings.TrimSuffix(l, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(edit(run, seq, l))
	}
	if err := os.WriteFile(jPath, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFindsNothingOnAConsistentBookAndJournal(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jPath)
	if code != exitOK || !strings.HasSuffix(out, "\nOK\n") || errOut != "" {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	// engine-1's once key, and engine-2's five projected lines (the large one too), were compared.
	if !strings.Contains(out, "2 runs; journal") || !strings.Contains(out, "2 runs, 11 unique lines, 11 in all; 6 stored lines compared byte for byte") {
		t.Errorf("check's summary:\n%s", out)
	}

	t.Run("beside an engine that enqueues and projects meanwhile", func(t *testing.T) {
		ctx := context.Background()
		s, err := outbox.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		j, err := journal.OpenFile(jPath)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		relay, err := outbox.NewRelay(s, j, "engine-3", outbox.WithForgetProjected(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); relay.Run(rctx) }()
		go func() {
			defer wg.Done()
			for i := 0; rctx.Err() == nil; i++ {
				if _, err := s.EnqueueEvent(ctx, "engine-3", journal.Builder("engine-3", "tick", i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		var last int64
		for range 5 {
			waitUntil(t, func() bool { p, _ := s.Projected(ctx, "engine-3"); return p > last })
			last, _ = s.Projected(ctx, "engine-3")
			if code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jPath); code != exitOK {
				t.Errorf("check beside the engine: exit %d\n%s%s", code, out, errOut)
			}
		}
		cancel()
		wg.Wait()
	})
}

func TestCheckFindsLinesTheJournalLacks(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	// The journal loses all but its first line: engine-1's handshake.
	first := true
	rewriteJournal(t, jPath, func(_ string, _ int64, l string) string {
		if first {
			first = false
			return l
		}
		return ""
	})
	code, rep := checkJSON(t, "--db", dbPath, "--journal", jPath)
	if code != exitFindings || rep.OK {
		t.Fatalf("exit %d, %+v", code, rep)
	}
	// engine-1's lines are all forgotten but one: its projected position is what the book knows.
	want := []checkFinding{
		{Kind: "missing", Run: "engine-1", FromSeq: 2, ToSeq: 6, Message: "run engine-1: the journal lacks seqs 2 to 6, which the book records as projected"},
		{Kind: "missing", Run: "engine-2", FromSeq: 1, ToSeq: 5, Message: "run engine-2: the journal lacks seqs 1 to 5, which the book records as projected"},
	}
	if diff := cmp.Diff(want, rep.Findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	code, out, _ := cli(t, "check", "--db", dbPath, "--journal", jPath)
	if code != exitFindings || !strings.Contains(out, want[0].Message+"\n") || !strings.HasSuffix(out, "\nFAILED: 2 findings\n") {
		t.Errorf("check: exit %d\n%s", code, out)
	}
}

// backUp copies the book at dbPath to a new file with VACUUM INTO, as docs/OPERATING.md says to back up a
// book while its engine runs.
func backUp(t *testing.T, dbPath, to string) {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Exec(`VACUUM INTO ?`, to); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFindsRunsAndLinesTheBookDoesNotKnowAfterARestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath, backup := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "backup.db")
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(s, j, "engine-1", outbox.WithForgetProjected(false))
	if err != nil {
		t.Fatal(err)
	}
	project := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := s.EnqueueEvent(ctx, "engine-1", journal.Builder("engine-1", "tick", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	project(3)
	backUp(t, dbPath, backup) // taken while the engine runs
	project(2)
	s.Close()
	j.Close()
	fileEngineStart(t, dbPath, jPath, "engine-2", 4, 0)

	if code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("the book itself: exit %d\n%s%s", code, out, errOut)
	}
	// The book is restored from the backup: it knows engine-1 up to seq 3, and no engine-2.
	code, rep := checkJSON(t, "--db", backup, "--journal", jPath)
	if code != exitFindings {
		t.Fatalf("exit %d, %+v", code, rep)
	}
	want := []checkFinding{
		{Kind: "unknown_run", Run: "engine-2", FromSeq: 1, ToSeq: 4, Lines: 4, Message: "run engine-2: the journal holds seqs 1 to 4 of a run the book does not know"},
		{Kind: "unknown_lines", Run: "engine-1", FromSeq: 4, ToSeq: 5, Message: "run engine-1: the journal holds seqs 4 to 5, beyond the highest seq the book gave the run (3)"},
	}
	if diff := cmp.Diff(want, rep.Findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	// docs/OPERATING.md shows this output, run in the book's directory.
	cmd := outboxCmd(t, "check", "--db", "backup.db", "--journal", "journal.jsonl")
	cmd.Dir = dir
	code, out, _ := runCmd(t, cmd)
	readme := `book backup.db: 1 run; journal journal.jsonl: 2 runs, 9 unique lines, 9 in all; 3 stored lines compared byte for byte
run engine-2: the journal holds seqs 1 to 4 of a run the book does not know
run engine-1: the journal holds seqs 4 to 5, beyond the highest seq the book gave the run (3)
FAILED: 2 findings
`
	if code != exitFindings || out != readme {
		t.Errorf("check's output: exit %d (-readme +got):\n%s", code, cmp.Diff(readme, out))
	}
}

func TestCheckFindsBytesThatDiffer(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	// engine-2's once key (seq 2) and its large line (seq 3, stored apart from its row) are changed
	// in the journal, under the same keys; and engine-1's once key, whose row the book keeps, comes
	// again with other bytes.
	var again string
	rewriteJournal(t, jPath, func(run string, seq int64, l string) string {
		switch {
		case run == "engine-2" && (seq == 2 || seq == 3):
			return strings.TrimSuffix(l, "}\n") + `,"edited":true}` + "\n"
		case run == "engine-1" && seq == 2:
			again = strings.Replace(l, `"unit_done"`, `"unit_undone"`, 1)
		}
		return l
	})
	f, err := os.OpenFile(jPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(again)
	f.Close()
	code, rep := checkJSON(t, "--db", dbPath, "--journal", jPath)
	if code != exitFindings {
		t.Fatalf("exit %d, %+v", code, rep)
	}
	want := []checkFinding{
		{Kind: "differ", Run: "engine-1", FromSeq: 2, ToSeq: 2, Lines: 1, Line: 12,
			Message: "run engine-1: seq 2 differs between the book and the journal (journal line 12)"},
		{Kind: "differ", Run: "engine-2", FromSeq: 2, ToSeq: 3, Lines: 2, Line: 8,
			Message: "run engine-2: seq 2 differs between the book and the journal (journal line 8); 2 lines differ, between seqs 2 and 3"},
	}
	if diff := cmp.Diff(want, rep.Findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestCheckWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dbPath, jPath string)
		exit  int
	}{
		{"on a book no engine holds open", func(*testing.T, string, string) {}, exitOK},
		{"on a crashed book, its -wal and -shm left behind", func(t *testing.T, dbPath, _ string) { crashBook(t, dbPath, true) }, exitOK},
		{"on a crashed book without its -shm", func(t *testing.T, dbPath, _ string) { crashBook(t, dbPath, false) }, exitOK},
		{"with findings", func(t *testing.T, _, jPath string) {
			rewriteJournal(t, jPath, func(_ string, seq int64, l string) string { return strings.Replace(l, "tick", "tock", 1) })
		}, exitFindings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbPath, jPath := checkedBook(t)
			tc.setup(t, dbPath, jPath)
			dir := filepath.Dir(dbPath)
			before := dirstate.Snapshot(t, dir)
			for _, args := range [][]string{
				{"check", "--db", dbPath, "--journal", jPath},
				{"check", "--json", "--db", dbPath, "--journal", jPath},
			} {
				if code, _, errOut := runOutbox(t, args...); code != tc.exit {
					t.Errorf("%v: exit %d: %s", args, code, errOut)
				}
				if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
					t.Fatalf("%v changed the directory (-before +after):\n%s", args, diff)
				}
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	// A run id a terminal would obey, from the journal.
	f, err := os.OpenFile(jPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`not a journal line` + "\n" + `{"engine_run_id":"\u001b[2J\u202eevil","seq":1}` + "\n" + `{"engine_run_id":"engine-2","seq":1`)
	f.Close()
	evil := "\x1b[2J\u202eevil"
	code, rep := checkJSON(t, "--db", dbPath, "--journal", jPath)
	if code != exitFindings || rep.OK || rep.DB != dbPath || rep.Journal != jPath || rep.BookRuns != 2 ||
		rep.JournalRuns != 3 || rep.JournalLines != 12 || rep.Compared != 6 || !rep.TornTail || rep.Error != "" {
		t.Errorf("exit %d, %+v", code, rep)
	}
	if got, want := kindsOf(rep), []string{"journal", "unknown_run"}; !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	if len(rep.Findings) == 2 && (rep.Findings[1].Run != evil || rep.Findings[0].Line != 12) {
		t.Errorf("findings: %+v", rep.Findings)
	}
	code, out, _ := cli(t, "check", "--db", dbPath, "--journal", jPath)
	if code != exitFindings || strings.ContainsAny(out, "\x1b\u202e") || !strings.Contains(out, `run "\x1b[2J\u202eevil": the journal holds seq 1 of a run the book does not know`) {
		t.Errorf("check's text output: exit %d\n%q", code, out)
	}

	// An input that cannot be read: one object still, naming why, and exit 2.
	code, rep = checkJSON(t, "--db", filepath.Join(t.TempDir(), "missing.db"), "--journal", jPath)
	if code != exitUsage || rep.OK || !strings.Contains(rep.Error, "does not exist") {
		t.Errorf("a missing book: exit %d, %+v", code, rep)
	}
	// A journal that is not one, or not a file: exit 2, naming it, and the book never read.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ journal, says string }{
		{dbPath, "not a journal"},
		{fifo, "not a regular file"},
		{filepath.Dir(jPath), "holds no segment"},
	} {
		if code, _, errOut := cli(t, "check", "--db", dbPath, "--journal", tc.journal); code != exitUsage || !strings.Contains(errOut, tc.says) {
			t.Errorf("--journal %s: exit %d, %q; want 2 saying %q", tc.journal, code, errOut, tc.says)
		}
	}
	if code, _, errOut := cli(t, "check", "--db", jPath, "--journal", jPath); code != exitUsage || strings.Count(errOut, "\n") != 1 {
		t.Errorf("--db naming the journal: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{
		{"check", "--db", dbPath},
		{"check", "--journal", jPath},
		{"check", "--db", dbPath, "--journal", jPath, "--nats", "nats://127.0.0.1:1", "--stream", "S"},
		{"check", "--db", dbPath, "--nats", "nats://127.0.0.1:1"},
		{"check", "--db", dbPath, "--journal", jPath, "extra"},
	} {
		if code, _, errOut := cli(t, args...); code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d %q, want a one-line usage error", args, code, errOut)
		}
	}
}

func kindsOf(rep checkReport) []string {
	var out []string
	for _, f := range rep.Findings {
		out = append(out, f.Kind)
	}
	return out
}

func TestCheckCrossChecksABookAgainstAJetStreamStream(t *testing.T) {
	ctx := context.Background()
	url, stop, err := embeddedNATS(ctx, t.TempDir(), "EVENTS", ojs.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dbPath := filepath.Join(t.TempDir(), "book.db")
	for _, run := range []string{"engine-1", "engine-2"} {
		nf := addNATSFlags(flag.NewFlagSet("", flag.ContinueOnError), "")
		nf.url = url
		sink, closeSink, err := nf.openSink("EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		engineStart(t, dbPath, sink, run, 4, 1)
		closeSink()
	}
	code, rep := checkJSON(t, "--db", dbPath, "--nats", url, "--stream", "EVENTS")
	if code != exitOK || !rep.OK || rep.Stream != "EVENTS" || rep.Server != url || rep.JournalLines != 9 || rep.Compared != 5 {
		t.Fatalf("check --nats: exit %d, %+v", code, rep)
	}
	// A line published around the sink, of a run this book does not know.
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	if _, err := js.Publish(ctx, ojs.DefaultPrefix+"."+ojs.Token("ghost"), []byte(`{"engine_run_id":"ghost","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	code, out, _ := cli(t, "check", "--db", dbPath, "--nats", url, "--stream", "EVENTS")
	if code != exitFindings || !strings.Contains(out, "run ghost: the journal holds seq 1 of a run the book does not know") ||
		!strings.Contains(out, `journal stream EVENTS at `+url) {
		t.Errorf("check --nats with a stranger's line: exit %d\n%s", code, out)
	}
	// A message that is not its subject's run's stops the read and is named.
	if _, err := js.Publish(ctx, ojs.DefaultPrefix+".other", []byte(`{"engine_run_id":"ghost","seq":2}`)); err != nil {
		t.Fatal(err)
	}
	code, rep = checkJSON(t, "--db", dbPath, "--nats", url, "--stream", "EVENTS")
	if code != exitFindings || len(rep.Findings) == 0 || rep.Findings[0].Kind != "journal" || !strings.Contains(rep.Findings[0].Message, "not the subject's run") {
		t.Errorf("a message of another subject: exit %d, %+v", code, rep.Findings)
	}
	if code, _, errOut := cli(t, "check", "--db", dbPath, "--nats", url, "--stream", "MISSING"); code != exitUsage || !strings.Contains(errOut, "stream create") {
		t.Errorf("a missing stream: exit %d, %q", code, errOut)
	}
}

// cliIn runs the command with stdin as its standard input.
func cliIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := commands[args[0]].run(context.Background(), args[1:], &out, &streams{Writer: &errOut, out: &out, in: strings.NewReader(stdin)})
	return code, out.String(), errOut.String()
}

func TestVerifyAndCheckCountAJournalsLinesTheSameWay(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	// Re-deliveries: engine-1's first two lines and engine-2's third come again.
	rewriteJournal(t, jPath, func(run string, seq int64, line string) string {
		if (run == "engine-1" && seq <= 2) || (run == "engine-2" && seq == 3) {
			return line + line
		}
		return line
	})
	_, vout, _ := cli(t, "verify", jPath)
	_, cout, _ := cli(t, "check", "--db", dbPath, "--journal", jPath)
	const want = "11 unique lines, 14 in all"
	if !strings.Contains(vout, "2 runs, "+want+", 3 duplicates skipped") {
		t.Errorf("verify:\n%s", vout)
	}
	if !strings.Contains(cout, "2 runs, "+want+";") {
		t.Errorf("check:\n%s", cout)
	}
	_, vjson, _ := cli(t, "verify", "--json", jPath)
	var vr verifyReport
	if err := json.Unmarshal([]byte(vjson), &vr); err != nil {
		t.Fatal(err)
	}
	_, cr := checkJSON(t, "--db", dbPath, "--journal", jPath)
	if vr.Lines != 11 || vr.TotalLines != 14 || cr.JournalUniqueLines != 11 || cr.JournalLines != 14 {
		t.Errorf("verify lines %d, total_lines %d; check journal_unique_lines %d, journal_lines %d: want 11 and 14 from both",
			vr.Lines, vr.TotalLines, cr.JournalUniqueLines, cr.JournalLines)
	}
}

func TestCheckWithJournalDashReadsStandardInputAsVerifyDashDoes(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	b, err := os.ReadFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cliIn(t, string(b), "check", "--db", dbPath, "--journal", "-")
	_, fromFile, _ := cli(t, "check", "--db", dbPath, "--journal", jPath)
	if code != exitOK || errOut != "" || strings.ReplaceAll(fromFile, quote(jPath), quote("-")) != out {
		t.Errorf("check --journal -: exit %d, %q\n%s\nfrom the file:\n%s", code, errOut, out, fromFile)
	}
	// What the book says is projected and standard input lacks is a finding, as for a file.
	lines := strings.SplitAfter(string(b), "\n")
	code, out, _ = cliIn(t, strings.Join(lines[:len(lines)-3], ""), "check", "--db", dbPath, "--journal", "-")
	if code != exitFindings || !strings.Contains(out, "the journal lacks") {
		t.Errorf("check --journal - of a journal cut short: exit %d\n%s", code, out)
	}
}

// A script iterating the findings (jq '.findings[]') must work on the healthy outcome too.
func TestCheckJSONFindingsIsAnEmptyListWhenTheBookAndJournalAgree(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	code, out, errOut := cli(t, "check", "--json", "--db", dbPath, "--journal", jPath)
	var rep map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	if code != exitOK || string(rep["findings"]) != "[]" {
		t.Errorf("exit %d, findings %s; want 0 and []", code, rep["findings"])
	}
}

func TestCheckComparesNothingOfALedgerLineWhoseDigestARollbackDropped(t *testing.T) {
	dbPath, jPath := checkedBook(t)
	// Each engine's once key is a ledger row that keeps its line's digest: rolled back, each keeps
	// neither line nor digest, and of the six lines check compared, four are left.
	for range 4 { // 10, 9, 8 and 7, which lose nothing
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
