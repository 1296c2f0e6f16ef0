// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/internal/testing/dirstate"
)

// evilRun is a run id that would act on a terminal printed raw; handlerDetail is a handler's error
// text holding invalid UTF-8 as well.
const (
	evilRun       = "evil\x1b[2J\a"
	handlerDetail = "refused \xff\x1b[31m"
)

// jline renders a journal line of run and seq, as a relay writes one.
func jline(run string, seq int64, data string) string {
	b, err := json.Marshal(map[string]any{"engine_run_id": run, "seq": seq, "data": data})
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// consumerHandler records each event, and parks run "h" as its handler's refusal.
func consumerHandler(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
	if ev.RunID == "h" {
		return fmt.Errorf("%w: %s", inbox.ErrQuarantine, handlerDetail)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq) VALUES (?, ?)`, ev.RunID, ev.Seq)
	return err
}

// consumerDB makes a consumer's database that has followed a journal file: run "a" applied up to 3,
// "b" and evilRun quarantined for a gap (1, then 3), "c" for a conflict, "h" by its handler; then
// one more line of "a" is appended, not yet read. It returns with the inbox closed.
func consumerDB(t *testing.T) (dbPath, jPath string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath = filepath.Join(dir, "consumer.db"), filepath.Join(dir, "journal.jsonl")
	journalText := jline("a", 1, "") + jline("a", 2, "") + jline("a", 3, "") +
		jline("b", 1, "") + jline("b", 3, "") + jline(evilRun, 1, "") + jline(evilRun, 3, "") +
		jline("c", 1, "first") + jline("c", 1, "other") + jline("h", 1, "")
	if err := os.WriteFile(jPath, []byte(journalText), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFile(ctx, jPath, consumerHandler); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	appendJournal(t, jPath, jline("a", 4, ""))
	return dbPath, jPath
}

func appendJournal(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// libraryView is what the library reads of the inbox at dbPath: the figures the commands must show.
func libraryView(t *testing.T, dbPath string) (runs []inbox.Run, qs []inbox.Quarantine, srcs []inbox.Source) {
	t.Helper()
	ctx := context.Background()
	in, err := inbox.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for r, err := range in.AllRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if qs, err = in.Quarantined(ctx); err != nil {
		t.Fatal(err)
	}
	if srcs, err = in.Sources(ctx); err != nil {
		t.Fatal(err)
	}
	return runs, qs, srcs
}

var ignoreTimes = cmpopts.IgnoreFields(inboxRunRow{}, "LastApplied")

func TestInboxStatsShowsEachRunsPositionAndQuarantineAndHowFarEachFileSourceIsBehind(t *testing.T) {
	dbPath, jPath := consumerDB(t)
	runs, qs, srcs := libraryView(t, dbPath)
	code, out, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("inbox stats --json: exit %d, %s", code, errOut)
	}
	var got inboxStatsReport
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("inbox stats --json: %v\n%s", err, out)
	}
	quar := map[string]inbox.Quarantine{}
	for _, q := range qs {
		quar[q.RunID] = q
	}
	want := inboxStatsReport{DB: dbPath, Quarantined: 4}
	for _, id := range []string{"a", "b", "c", evilRun, "h"} { // in byte order, as the library lists them
		row := inboxRunRow{RunID: id}
		for _, r := range runs {
			if r.RunID == id {
				row.Position = r.Position
			}
		}
		if q, ok := quar[id]; ok {
			row.Quarantine = &inboxQuarantine{Reason: q.Reason, Expected: q.Expected, Got: q.Got, Detail: strings.ToValidUTF8(q.Detail, "\uFFFD"),
				DetailEscaped: escapedIfInvalid(q.Detail), Since: q.Since.UTC()}
		}
		want.Runs = append(want.Runs, row)
	}
	p, err := inbox.ParseFilePosition(srcs[0].Position)
	if err != nil {
		t.Fatal(err)
	}
	behind := int64(len(jline("a", 4, "")))
	abs, _ := filepath.Abs(jPath)
	want.Sources = []inboxSourceRow{{Name: inboxseam.FileSourcePrefix + abs, BehindBytes: &behind, Updated: srcs[0].Updated.UTC(),
		File: &inboxFilePosition{Path: abs, Offset: p.Offset, Device: p.Device, Inode: p.Inode}}}
	if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
		t.Errorf("inbox stats --json (-want +got):\n%s", diff)
	}
	for _, r := range got.Runs {
		// Run h was refused by its handler at its first line: it never applied one.
		if (r.LastApplied == nil) != (r.RunID == "h") {
			t.Errorf("run %q: last applied %v", r.RunID, r.LastApplied)
		}
	}
	if got.Runs[0].Position != 3 || p.Offset == 0 {
		t.Errorf("run a at %d, the file read to byte %d", got.Runs[0].Position, p.Offset)
	}

	code, out, errOut = cli(t, "inbox", "stats", "--db", dbPath)
	if code != exitOK {
		t.Fatalf("inbox stats: exit %d, %s", code, errOut)
	}
	for _, w := range []string{"5 runs, 4 quarantined; 1 source", "gap: expected seq 2, got 3", "conflict at seq 1", "handler at seq 1",
		fmt.Sprintf("%d bytes", behind), fmt.Sprintf("at byte %d", p.Offset)} {
		if !strings.Contains(out, w) {
			t.Errorf("inbox stats does not say %q:\n%s", w, out)
		}
	}
}

func TestInboxQuarantinedListsEachQuarantinedRunExactlyInJSON(t *testing.T) {
	dbPath, _ := consumerDB(t)
	_, qs, _ := libraryView(t, dbPath)
	code, out, errOut := cli(t, "inbox", "quarantined", "--db", dbPath, "--json")
	if code != exitFindings {
		t.Fatalf("exit %d, %s", code, errOut)
	}
	var got inboxQuarantinedReport
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Quarantined) != len(qs) || len(qs) != 4 {
		t.Fatalf("%d quarantined in JSON, the library has %d:\n%s", len(got.Quarantined), len(qs), out)
	}
	for i, q := range qs {
		g := got.Quarantined[i]
		detail := g.Detail
		if g.DetailEscaped != "" {
			var err error
			if detail, err = strconv.Unquote(g.DetailEscaped); err != nil {
				t.Fatalf("detail_escaped %q: %v", g.DetailEscaped, err)
			}
		}
		if g.RunID != q.RunID || g.Reason != q.Reason || g.Expected != q.Expected || g.Got != q.Got || detail != q.Detail || !g.Since.Equal(q.Since) {
			t.Errorf("quarantine %d: JSON %+v, library %+v", i, g, q)
		}
	}
	if h := got.Quarantined[3]; h.RunID != "h" || !strings.Contains(h.DetailEscaped, `\xff\x1b[31m`) {
		t.Errorf("the handler's detail is not escaped exactly: %+v", h)
	}
	code, out, _ = cli(t, "inbox", "quarantined", "--db", dbPath)
	if code != exitFindings || !strings.Contains(out, "4 runs quarantined") || !strings.Contains(out, `"evil\x1b[2J\a"  gap`) {
		t.Errorf("inbox quarantined: exit %d\n%s", code, out)
	}
}

func TestInboxOutputIsTerminalSafe(t *testing.T) {
	dbPath, _ := consumerDB(t)
	_, out, _ := runOutbox(t, "inbox", "quarantined", "--db", dbPath)
	for _, want := range []string{`"evil\x1b[2J\a"`, `"inbox: quarantine the run: refused \xff\x1b[31m"`} {
		if !strings.Contains(out, want) {
			t.Errorf("quarantined does not show %s escaped:\n%s", want, out)
		}
	}
	for _, args := range [][]string{
		{"inbox", "stats", "--db", dbPath},
		{"inbox", "quarantined", "--db", dbPath},
		{"inbox", "release", "--db", dbPath, "--run", "no\x1b[2Jsuch"},
		{"inbox", "accept-gap", "--db", dbPath, "--run", "no\x1b[2Jsuch", "--reason", "x"},
		{"inbox", "accept-gap", "--db", dbPath, "--run", "b", "--reason", "lost\x1b[2J"},
		{"inbox", "stats", "--db", filepath.Join(t.TempDir(), "gone\x1b[2J\xff")},
		{"inbox", "frobnicate\x1b[2J"},
		{"inbox", "release", "--db", dbPath, "--run", evilRun}, // last: it lifts that quarantine
	} {
		_, out, errOut := runOutbox(t, args...)
		checkTerminalSafe(t, strings.Join(args, " ")+" (stdout)", out)
		checkTerminalSafe(t, strings.Join(args, " ")+" (stderr)", errOut)
	}
}

func TestInboxReleaseLiftsTheQuarantineAndRewindsTheSources(t *testing.T) {
	dbPath, _ := consumerDB(t)
	code, out, errOut := cli(t, "inbox", "release", "--db", dbPath, "--run", "b")
	if code != exitOK || !strings.Contains(out, "run b released: it goes on from seq 2") || errOut != "" {
		t.Fatalf("release: exit %d, %q %q", code, out, errOut)
	}
	runs, qs, srcs := libraryView(t, dbPath)
	for _, q := range qs {
		if q.RunID == "b" {
			t.Error("run b is still quarantined")
		}
	}
	if len(qs) != 3 || len(srcs) != 1 || srcs[0].Position != nil || len(runs) == 0 {
		t.Errorf("after release: %d quarantined, sources %+v", len(qs), srcs)
	}
	if code, out, _ := cli(t, "inbox", "stats", "--db", dbPath); code != exitOK || !strings.Contains(out, "none: reads again from its start") {
		t.Errorf("stats after a release: exit %d\n%s", code, out)
	}
}

func TestInboxReleaseOfARunNotQuarantinedExitsOneSayingSo(t *testing.T) {
	dbPath, _ := consumerDB(t)
	before := dirstate.Snapshot(t, filepath.Dir(dbPath))
	for _, run := range []string{"a", "never-seen"} {
		code, out, errOut := cli(t, "inbox", "release", "--db", dbPath, "--run", run)
		if code != exitFindings || out != "" || errOut != "outbox inbox release: run "+run+" is not quarantined; nothing changed\n" {
			t.Errorf("release of %s: exit %d, %q %q", run, code, out, errOut)
		}
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, filepath.Dir(dbPath))); diff != "" {
		t.Errorf("a refused release changed the directory (-before +after):\n%s", diff)
	}
}

func TestInboxAcceptGapGivesUpTheGapsSeqsAndRecordsWhy(t *testing.T) {
	dbPath, _ := consumerDB(t)
	code, out, errOut := cli(t, "inbox", "accept-gap", "--db", dbPath, "--run", "b", "--reason", "line 2 lost with the old disk")
	if code != exitOK || !strings.Contains(out, "run b: seqs 2 to 2 given up") || !strings.Contains(out, "goes on from seq 3") {
		t.Fatalf("accept-gap: exit %d, %q %q", code, out, errOut)
	}
	ctx := context.Background()
	in, err := inbox.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil || len(gaps) != 1 || gaps[0].RunID != "b" || gaps[0].FirstSeq != 2 || gaps[0].LastSeq != 2 ||
		gaps[0].Reason != "line 2 lost with the old disk" || gaps[0].AcceptedBy == "" {
		t.Errorf("accepted gaps: %+v, %v", gaps, err)
	}
	if p, err := in.Position(ctx, "b"); err != nil || p != 2 {
		t.Errorf("run b at %d after the gap was accepted, want 2 (%v)", p, err)
	}
}

func TestInboxAcceptGapOfAConflictOrAHandlersRefusalIsRefused(t *testing.T) {
	dbPath, _ := consumerDB(t)
	before := dirstate.Snapshot(t, filepath.Dir(dbPath))
	for run, reason := range map[string]string{"c": "conflict", "h": "handler"} {
		code, out, errOut := cli(t, "inbox", "accept-gap", "--db", dbPath, "--run", run, "--reason", "lost")
		if code != exitFindings || out != "" || !strings.Contains(errOut, "run "+run+" is quarantined for a "+reason+", not a gap") ||
			strings.Count(errOut, "\n") != 1 {
			t.Errorf("accept-gap of %s: exit %d, %q %q", run, code, out, errOut)
		}
	}
	if code, _, errOut := cli(t, "inbox", "accept-gap", "--db", dbPath, "--run", "a", "--reason", "lost"); code != exitFindings ||
		!strings.Contains(errOut, "run a is not quarantined") {
		t.Errorf("accept-gap of a healthy run: exit %d, %q", code, errOut)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, filepath.Dir(dbPath))); diff != "" {
		t.Errorf("a refused accept-gap changed the directory (-before +after):\n%s", diff)
	}
}

func TestInboxReleaseAndAcceptGapRefuseBesideARunningConsumer(t *testing.T) {
	dbPath, _ := consumerDB(t)
	in, err := inbox.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, args := range [][]string{
		{"inbox", "release", "--db", dbPath, "--run", "b"},
		{"inbox", "accept-gap", "--db", dbPath, "--run", "b", "--reason", "lost"},
	} {
		code, out, errOut := runOutbox(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "is open by a running consumer") {
			t.Errorf("%v beside a consumer: exit %d, %q %q", args[1], code, out, errOut)
		}
	}
	qs, err := in.Quarantined(context.Background())
	if err != nil || len(qs) != 4 {
		t.Errorf("quarantines after refused commands: %d, %v", len(qs), err)
	}
}

// inboxReadOnlyRuns are the inbox's read-only commands on the consumer's database at db.
func inboxReadOnlyRuns(db string) [][]string {
	return [][]string{
		{"inbox", "stats", "--db", db},
		{"inbox", "stats", "--db", db, "--json"},
		{"inbox", "quarantined", "--db", db},
		{"inbox", "quarantined", "--db", db, "--json"},
	}
}

func TestInboxReadOnlyCommandsWriteNothing(t *testing.T) {
	t.Run("on a database that no consumer holds open", func(t *testing.T) {
		dbPath, _ := consumerDB(t)
		dir := filepath.Dir(dbPath)
		before := dirstate.Snapshot(t, dir)
		for _, args := range inboxReadOnlyRuns(dbPath) {
			if code, _, errOut := runOutbox(t, args...); code == exitUsage { // quarantined exits 1: runs are
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Fatalf("%v changed the directory (-before +after):\n%s", args, diff)
			}
		}
	})
	t.Run("in a directory the user cannot write", func(t *testing.T) {
		base, err := os.MkdirTemp("", "outbox-cli-inbox-ro-")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(base, "consumer")
		t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(base) })
		srcDB, _ := consumerDB(t)
		os.Mkdir(dir, 0o755)
		dbPath := filepath.Join(dir, "consumer.db")
		dirstate.CopyFile(t, srcDB, dbPath, 0o444)
		os.Chmod(dir, 0o555)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "outbox")
		os.Chmod(base, 0o755)
		dirstate.CopyFile(t, exe, bin, 0o755)
		before := dirstate.Snapshot(t, dir)
		for _, args := range inboxReadOnlyRuns(dbPath) {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), asOutbox+"=1")
			if os.Geteuid() == 0 { // permissions do not bind root: read as nobody
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			if code, _, errOut := runCmd(t, cmd); code == exitUsage {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
		if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("the directory changed (-before +after):\n%s", diff)
		}
	})
	t.Run("beside a running consumer", func(t *testing.T) {
		dbPath, jPath := consumerDB(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		in, err := inbox.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		done := make(chan error, 1)
		go func() { done <- in.FollowFile(ctx, jPath, consumerHandler) }()
		waitUntil(t, func() bool { p, err := in.Position(ctx, "a"); return err == nil && p == 4 })
		for _, args := range inboxReadOnlyRuns(dbPath) {
			if code, _, errOut := runOutbox(t, args...); code == exitUsage { // quarantined exits 1: runs are
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
		// What the consumer committed since it started, read beside it.
		_, out, _ := runOutbox(t, "inbox", "stats", "--db", dbPath, "--json")
		var rep inboxStatsReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Runs[0].RunID != "a" || rep.Runs[0].Position != 4 || rep.Sources[0].BehindBytes == nil || *rep.Sources[0].BehindBytes != 0 {
			t.Errorf("stats beside the consumer does not show its commit:\n%s", out)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("FollowFile: %v", err)
		}
	})
}

// waitUntil polls cond, failing the test after a minute (a hang, not a timing assertion).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("still not so after a minute")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestInboxCommandsFollowTheConventions(t *testing.T) {
	dbPath, _ := consumerDB(t)
	for _, sub := range []string{"stats", "quarantined", "release", "accept-gap"} {
		code, out, errOut := cli(t, "inbox", sub, "--help")
		if code != exitOK || !strings.HasPrefix(out, "usage: outbox inbox "+sub+" --db FILE") || errOut != "" {
			t.Errorf("inbox %s --help: exit %d, %q %q", sub, code, out, errOut)
		}
	}
	if code, out, _ := cli(t, "inbox", "--help"); code != exitOK || !strings.Contains(out, "accept-gap") {
		t.Errorf("inbox --help: exit %d, %q", code, out)
	}
	for _, args := range [][]string{
		{"inbox"},
		{"inbox", "frobnicate"},
		{"inbox", "--db", dbPath},
		{"inbox", "stats"},
		{"inbox", "stats", "--db", dbPath, "extra"},
		{"inbox", "quarantined", "--nope"},
		{"inbox", "release", "--db", dbPath},
		{"inbox", "accept-gap", "--db", dbPath, "--run", "b"},
		{"inbox", "accept-gap", "--db", dbPath, "--reason", "x"},
		{"metrics", "--listen", "127.0.0.1:0"},
	} {
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "--help") {
			t.Errorf("%v: exit %d, %q %q; want 2 and one line", args, code, out, errOut)
		}
	}
}

func TestInboxCommandsRefuseWhatIsNotAConsumersDatabaseAndChangeNothing(t *testing.T) {
	bookPath, _ := book(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.db")
	d, err := sql.Open("sqlite3", "file:"+plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`CREATE TABLE mine (x)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, tc := range []struct{ path, says string }{
		{bookPath, "it is a book"},
		{plain, "holds no inbox"},
		{filepath.Join(dir, "missing.db"), "does not exist"},
		{dir, "is a directory"},
	} {
		for _, args := range [][]string{
			{"inbox", "stats", "--db", tc.path},
			{"inbox", "quarantined", "--db", tc.path},
			{"inbox", "release", "--db", tc.path, "--run", "b"},
			{"inbox", "accept-gap", "--db", tc.path, "--run", "b", "--reason", "lost"},
			{"metrics", "--inbox", tc.path, "--listen", "127.0.0.1:0"},
		} {
			if args[0] == "metrics" && tc.says == "does not exist" {
				// The exporter waits for a database its consumer has not created yet, answering
				// outbox_inbox_up 0 (TestMetricsAnswersUpZeroWhileTheBookDoesNotExistAndOneOnceItDoes).
				continue
			}
			before, beforeBook := dirstate.Snapshot(t, dir), dirstate.Snapshot(t, filepath.Dir(bookPath))
			code, out, errOut := cli(t, args...)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.says) {
				t.Errorf("%v: exit %d, %q %q; want 2 and one line saying %q", args, code, out, errOut, tc.says)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Errorf("%v changed the directory (-before +after):\n%s", args, diff)
			}
			if diff := cmp.Diff(beforeBook, dirstate.Snapshot(t, filepath.Dir(bookPath))); diff != "" {
				t.Errorf("%v changed the book's directory (-before +after):\n%s", args, diff)
			}
		}
	}
}

func TestInboxStatsShowsAnotherSourcesPositionAsStoredAndAMissingFilesDistanceAsUnknown(t *testing.T) {
	ctx := context.Background()
	dbPath, jPath := consumerDB(t)
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFrom(ctx, "nats:EVENTS", nil, []byte{1, 2, 0xff}, nil, consumerHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	if err := os.Remove(jPath); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--json")
	if code != exitOK {
		t.Fatalf("exit %d, %s", code, errOut)
	}
	var rep inboxStatsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Sources) != 2 {
		t.Fatalf("sources: %+v", rep.Sources)
	}
	file, stream := rep.Sources[0], rep.Sources[1]
	if file.File == nil || file.BehindBytes != nil || !strings.Contains(file.BehindError, "is not in its directory any more") {
		t.Errorf("a missing file's source: %+v", file)
	}
	if stream.Name != "nats:EVENTS" || stream.PositionHex != "0102ff" || stream.File != nil || stream.BehindBytes != nil || stream.BehindError != "" {
		t.Errorf("a stream's source: %+v", stream)
	}
	code, out, _ = cli(t, "inbox", "stats", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, "opaque, 3 bytes") || !strings.Contains(out, "unknown: ") {
		t.Errorf("inbox stats: exit %d\n%s", code, out)
	}
	checkTerminalSafe(t, "inbox stats", out)
}

func TestInboxQuarantinedExitsOneWhileRunsAreQuarantined(t *testing.T) {
	dbPath, _ := consumerDB(t) // four runs quarantined
	for _, args := range [][]string{
		{"inbox", "quarantined", "--db", dbPath},
		{"inbox", "quarantined", "--db", dbPath, "--json"},
	} {
		if code, out, errOut := cli(t, args...); code != exitFindings || errOut != "" || !strings.Contains(out, "evil") {
			t.Errorf("%v with runs quarantined: exit %d, %q", args, code, errOut)
		}
	}
	// Released, one by one: the last release brings the exit status to 0.
	qs, err := func() ([]inbox.Quarantine, error) {
		in, err := inbox.OpenReadOnly(context.Background(), dbPath)
		if err != nil {
			return nil, err
		}
		defer in.Close()
		return in.Quarantined(context.Background())
	}()
	if err != nil || len(qs) == 0 {
		t.Fatalf("quarantines: %d, %v", len(qs), err)
	}
	for _, q := range qs {
		if code, _, errOut := cli(t, "inbox", "release", "--db", dbPath, "--run", q.RunID); code != exitOK {
			t.Fatalf("release %q: exit %d, %s", q.RunID, code, errOut)
		}
	}
	if code, out, errOut := cli(t, "inbox", "quarantined", "--db", dbPath); code != exitOK || !strings.Contains(out, "0 runs quarantined") {
		t.Errorf("with no run quarantined: exit %d, %q %q", code, out, errOut)
	}
	if _, out, _ := cli(t, "inbox", "quarantined", "--help"); !strings.Contains(out, "Exit status: 0 no run is quarantined, 1 runs are quarantined") {
		t.Errorf("--help does not give the exit codes:\n%s", out)
	}
}
