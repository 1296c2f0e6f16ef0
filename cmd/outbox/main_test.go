// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// TestMain lets the demo re-execute the test binary as its engine and its platform, as it
// re-executes the outbox binary in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == engineCommand || os.Args[1] == platformCommand) {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv(asOutbox) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// asOutbox, set to 1 in its environment, makes the test binary the outbox command, so that a test
// runs the command as a real process (see runOutbox).
const asOutbox = "OUTBOX_TEST_AS_COMMAND"

// outboxCmd returns the outbox command, as a process of its own, with args.
func outboxCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), asOutbox+"=1")
	return cmd
}

// runOutbox runs the outbox command as a process of its own and returns its exit status, standard
// output and standard error.
func runOutbox(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCmd(t, outboxCmd(t, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// cli runs the command in-process and returns its exit status, standard output and error.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// book makes a database with two runs, one projected into a journal, one with three lines pending.
func book(t *testing.T) (dbPath, jPath string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
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
	for i := 0; i < 2; i++ {
		s.EnqueueEvent(ctx, "old", journal.Builder("old", "x", i))
	}
	relay, err := outbox.NewRelay(s, j, "old", outbox.WithForgetProjected(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.EnqueueEvent(ctx, "dead", journal.Handshake("dead", nil))
	s.EnqueueOnce(ctx, "dead", "unit_done:1", journal.Builder("dead", "unit_done", map[string]int{"unit": 1}))
	s.EnqueueEvent(ctx, "dead", journal.Builder("dead", "spend", map[string]int{"amount": 5}))
	return dbPath, jPath
}

func fileDigest(t *testing.T, paths ...string) string {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		h.Write(b)
		fmt.Fprintf(h, "|%d|", len(b))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestHelpForEveryCommandExitsZero(t *testing.T) {
	for name := range commands {
		if code, out, _ := cli(t, name, "--help"); code != exitOK || !strings.Contains(out, "usage: outbox "+name) {
			t.Errorf("%s --help: exit %d, %q", name, code, out)
		}
	}
	if code, out, _ := cli(t, "help"); code != exitOK || !strings.Contains(out, "verify") {
		t.Errorf("help: %d %q", code, out)
	}
	_, help, _ := cli(t, "help")
	for _, c := range []string{engineCommand, platformCommand} {
		if strings.Contains(help, c) {
			t.Errorf("help lists the hidden command %s", c)
		}
	}
}

func TestUnknownCommandsAndFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"stats", "--nope"},
		{"verify"},
		{"verify", "a", "b"},
		{"pending", "--db", "x"},
		{"migrate", "sideways", "--db", "x"},
		{"demo", "--units", "1"},
		{"pending", "--db", "x", "--run", "r", "--limit", "0"},
		{"stats"},
		{"relay", "--db", "x"},
		{"migrate", "--db", "x"},
		{"pending", "--limit", "many"},
	} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if errOut == "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line", args, errOut)
		}
	}
}

func TestMigrateUpStatusVersionDown(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	if code, out, errOut := cli(t, "migrate", "up", "--db", db); code != exitOK || !strings.Contains(out, "applied 00001") {
		t.Fatalf("up: %d %q %q", code, out, errOut)
	}
	known := migrations.Known()
	latest, before := known[len(known)-1], known[len(known)-2]
	if code, out, _ := cli(t, "migrate", "--db", db, "version"); code != exitOK || strings.TrimSpace(out) != fmt.Sprint(latest) {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out, _ := cli(t, "migrate", "status", "--db", db); code != exitOK || strings.Count(out, "applied") != len(known) {
		t.Errorf("status: %d %q", code, out)
	}
	if code, out, _ := cli(t, "migrate", "down", "--db", db); code != exitOK || !strings.Contains(out, fmt.Sprintf("rolled back %05d", latest)) {
		t.Errorf("down: %d %q", code, out)
	}
	if code, out, _ := cli(t, "migrate", "version", "--db", db); code != exitOK || strings.TrimSpace(out) != fmt.Sprint(before) {
		t.Errorf("version after down: %d %q", code, out)
	}
	// The library reads the same version table and brings the schema back up.
	s, err := outbox.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if code, out, _ := cli(t, "migrate", "version", "--db", db); strings.TrimSpace(out) != fmt.Sprint(latest) || code != exitOK {
		t.Errorf("version after Open: %q", out)
	}
	if code, _, _ := cli(t, "migrate", "version", "--db", filepath.Join(t.TempDir(), "missing.db")); code != exitUsage {
		t.Errorf("version of a missing file: exit %d", code)
	}
}

func TestStatsIsReadOnlyAndWorksBesideARunningEngine(t *testing.T) {
	dbPath, _ := book(t)
	s, err := outbox.Open(context.Background(), dbPath) // the engine holds the writer lock
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := fileDigest(t, dbPath, dbPath+"-wal")
	code, out, errOut := cli(t, "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("stats: %d %s", code, errOut)
	}
	if after := fileDigest(t, dbPath, dbPath+"-wal"); after != before {
		t.Error("stats changed the database files")
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	got := map[string][3]int64{}
	for _, r := range rep.Runs {
		got[r.RunID] = [3]int64{r.LastSeq, r.Projected, r.Pending}
		if r.RunID == "dead" && (r.OldestAge == nil || *r.OldestAge < 0) {
			t.Errorf("dead run's oldest pending age = %v", r.OldestAge)
		}
	}
	if diff := cmp.Diff(map[string][3]int64{"old": {2, 2, 0}, "dead": {3, 0, 3}}, got); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	if rep.FileBytes == 0 {
		t.Error("file_bytes is 0")
	}
	if code, out, _ := cli(t, "stats", "--db", dbPath); code != exitOK || !strings.Contains(out, "dead") {
		t.Errorf("stats: %d %q", code, out)
	}
}

func TestStatsAndPendingRefuseMissingAndNonDatabaseFiles(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("not a database\n"), 0o644)
	before := fileDigest(t, text)
	for _, args := range [][]string{
		{"stats", "--db", filepath.Join(dir, "missing.db")},
		{"stats", "--db", text},
		{"pending", "--db", text, "--run", "r"},
		{"relay", "--db", filepath.Join(dir, "missing.db"), "--journal", filepath.Join(dir, "j")},
	} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	if fileDigest(t, text) != before {
		t.Error("the text file was changed")
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !os.IsNotExist(err) {
		t.Error("a missing database was created")
	}
}

func TestPendingPrintsLinesExactlyAsStored(t *testing.T) {
	dbPath, _ := book(t)
	s, _ := outbox.OpenReadOnly(context.Background(), dbPath)
	lines, _ := s.PendingEvents(context.Background(), "dead", 0, 10)
	s.Close()
	var want bytes.Buffer
	for _, l := range lines[1:] {
		want.Write(l.Line)
		want.WriteByte('\n')
	}
	code, out, errOut := cli(t, "pending", "--db", dbPath, "--run", "dead", "--after", "1", "--limit", "5")
	if code != exitOK || out != want.String() {
		t.Errorf("pending: %d %q, want %q (%s)", code, out, want.String(), errOut)
	}
	if code, out, _ := cli(t, "pending", "--db", dbPath, "--run", "dead", "--limit", "1"); code != exitOK || strings.Count(out, "\n") != 1 {
		t.Errorf("--limit 1: %q", out)
	}
}

func TestRelayDrainsAStoppedEnginesBacklog(t *testing.T) {
	dbPath, jPath := book(t)
	code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath)
	if code != exitOK || !strings.Contains(out, "projected 3 lines") {
		t.Fatalf("relay: %d %q %q", code, out, errOut)
	}
	f, _ := os.Open(jPath)
	rep, err := journal.Verify(f)
	f.Close()
	if err != nil || rep.Runs["dead"].Last != 3 || rep.Runs["old"].Last != 2 {
		t.Errorf("journal after relay: %+v %v", rep, err)
	}
	s, _ := outbox.OpenReadOnly(context.Background(), dbPath)
	defer s.Close()
	if ledger, _ := s.AnnouncedOnceKeys(context.Background()); !ledger["unit_done:1"] {
		t.Error("the relayed once key is not in the ledger")
	}
	// A second relay has nothing left to send.
	if code, out, _ := cli(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK || !strings.Contains(out, "projected 0 lines") {
		t.Errorf("second relay: %d %q", code, out)
	}
}

func TestRelayRefusesALockedDatabaseOrJournal(t *testing.T) {
	dbPath, jPath := book(t)
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath)
	j.Close()
	if code != exitUsage || !strings.Contains(errOut, "locked") {
		t.Errorf("locked journal: %d %q", code, errOut)
	}
	s, _ := outbox.Open(context.Background(), dbPath)
	code, _, errOut = cli(t, "relay", "--db", dbPath, "--journal", jPath)
	s.Close()
	if code != exitUsage || !strings.Contains(errOut, "engine running") {
		t.Errorf("locked database: %d %q", code, errOut)
	}
}

func TestVerifyExitStatusNamesTheProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	l := func(run string, seq int, extra string) string {
		return fmt.Sprintf(`{"engine_run_id":%q,"seq":%d%s}`+"\n", run, seq, extra)
	}
	clean := write("clean", l("a", 1, "")+l("a", 2, "")+l("a", 2, ""))
	code, out, _ := cli(t, "verify", clean)
	if code != exitOK || !strings.Contains(out, "2 unique lines, 3 in all, 1 duplicate skipped") {
		t.Errorf("clean: %d %q", code, out)
	}
	for name, tc := range map[string]struct {
		content string
		kind    string
		names   []string
	}{
		"gap":       {l("a", 1, "") + l("a", 3, ""), "gap", []string{"line 2", `"a"`, "expected seq 2", "found 3"}},
		"conflict":  {l("a", 1, `,"x":1`) + l("a", 1, `,"x":2`), "conflict", []string{"line 2", `"a"`, "seq 1"}},
		"malformed": {l("a", 1, "") + "{oops\n", "malformed", []string{"line 2"}},
	} {
		p := write(name, tc.content)
		code, _, errOut := cli(t, "verify", p)
		if code != exitFindings {
			t.Errorf("%s: exit %d, want 1", name, code)
		}
		for _, n := range tc.names {
			if !strings.Contains(errOut, n) {
				t.Errorf("%s: %q does not name %s", name, errOut, n)
			}
		}
		code, out, _ := cli(t, "verify", "--json", p)
		var rep verifyReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitFindings || rep.OK || rep.Finding == nil || rep.Finding.Kind != tc.kind || rep.Finding.Line != 2 {
			t.Errorf("%s --json: %d %v %+v", name, code, err, rep.Finding)
		}
	}
	if code, _, _ := cli(t, "verify", filepath.Join(dir, "missing")); code != exitUsage {
		t.Errorf("missing file: exit %d, want 2", code)
	}
}

func TestDemoKillsTheEngineAndFindsNothingLost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--dir", dir, "--units", "300", "--crashes", "3", "--seed", "7")
	if code != exitOK {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"3 killed with SIGKILL", "gaps                          0", "conflicts                     0",
		"units announced exactly once  300 of 300", "OK: nothing lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"book.db", "journal", "journal/00000000000000000000.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("demo left no %s: %v", f, err)
		}
	}
	// The directory now holds a book: a second demo there is refused.
	if code, _, _ := cli(t, "demo", "--dir", dir); code != exitUsage {
		t.Errorf("demo into a used directory: exit %d, want 2", code)
	}
}

func TestRelayDrawsABarOnATerminalAndPlainCountsElsewhere(t *testing.T) {
	var tty bytes.Buffer
	p := &progress{w: &tty, total: 10, tty: true}
	p.add(5)
	p.add(5)
	p.done()
	if out := tty.String(); !strings.Contains(out, "\r[####################                    ] 5/10 lines") ||
		!strings.Contains(out, "] 10/10 lines\n") {
		t.Errorf("terminal output %q", out)
	}
	var plain bytes.Buffer
	p = newProgress(&plain, 10) // a buffer is not a terminal
	p.add(4)
	p.add(6)
	p.done()
	if out := plain.String(); strings.Contains(out, "\r") || !strings.HasSuffix(out, "projected 10/10 lines\n") {
		t.Errorf("plain output %q", out)
	}
}

// SIGINT while `outbox relay` drains a backlog, three times at different points, then a relay to the
// end: the journal holds every line once. The interrupted relay records the batch the journal already
// has before it exits, so a clean shutdown re-sends nothing; before, each interrupt during an append
// dropped the record and the next relay sent that batch again.
func TestRelayInterruptedBySIGINTReSendsNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 30000
	for i := 0; i < backlog; i += 1000 {
		builds := make([]outbox.EventBuilder, 1000)
		for k := range builds {
			builds[k] = journal.Builder("dead", "spend", map[string]int{"i": i + k})
		}
		if _, err := s.EnqueueEvents(ctx, "dead", builds); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		before := int64(0)
		if st, err := os.Stat(jPath); err == nil {
			before = st.Size()
		}
		cmd := outboxCmd(t, "relay", "--db", dbPath, "--journal", jPath)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Interrupted once the journal has grown: in the middle of the drain, often in an append.
		for {
			if st, err := os.Stat(jPath); err == nil && st.Size() > before {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil && cmd.ProcessState.ExitCode() == 0 {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("the last relay: %d %q %q", code, out, errOut)
	}
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil || rep.Lines != backlog || rep.Duplicates != 0 {
		t.Fatalf("the journal after three interrupts: %d lines, %d duplicates, %v; want %d lines, none twice",
			rep.Lines, rep.Duplicates, err, backlog)
	}
}
