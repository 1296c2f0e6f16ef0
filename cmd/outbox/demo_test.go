// SPDX-License-Identifier: Apache-2.0

package main

import (
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/journal"
)

// spendOf is the book's spend for units 1..n.
func spendOf(n int) int64 {
	var c int64
	for u := 1; u <= n; u++ {
		c += demo.Cents(u)
	}
	return c
}

var platformLineRE = regexp.MustCompile(`(?m)^platform: units (\d+) of (\d+), spend (\d+) cents, duplicates skipped (\d+), restarts (\d+)$`)

func TestDemoPlatformTotalsEqualTheBooks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--dir", dir, "--units", "200", "--crashes", "2", "--seed", "5")
	if code != exitOK {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	m := platformLineRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no platform line in:\n%s", out)
	}
	if want := fmt.Sprint(spendOf(200)); m[1] != "200" || m[2] != "200" || m[3] != want {
		t.Errorf("platform line %q, want units 200 of 200 and spend %s cents", m[0], want)
	}
	// The first kill of the platform is always reached; a later one may fall short of its count of
	// lines when a killed start had committed a batch it had not reported.
	if restarts, _ := strconv.Atoi(m[5]); restarts < 1 || restarts > 2 {
		t.Errorf("the platform restarted %d times, want 1 or 2", restarts)
	}
	if _, err := os.Stat(filepath.Join(dir, "platform.db")); err != nil {
		t.Errorf("demo left no platform.db: %v", err)
	}
	// The platform's totals are the book's, read here for ourselves from the platform's database.
	d, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "platform.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var units, distinct int
	var spend int64
	if err := d.QueryRow(`SELECT count(*), count(DISTINCT unit), (SELECT SUM(cents) FROM platform_spend) FROM platform_units`).
		Scan(&units, &distinct, &spend); err != nil {
		t.Fatal(err)
	}
	if units != 200 || distinct != 200 || spend != spendOf(200) {
		t.Errorf("platform.db holds %d units (%d distinct), %d cents", units, distinct, spend)
	}
}

func TestDemoFailsWhenThePlatformAppliedALineTwice(t *testing.T) {
	beforeDemoCheck = func(dir string) {
		d, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "platform.db"))
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		// One spend line's effects, written a second time: what a consumer without an inbox does
		// after a crash between its writes and its checkpoint.
		for _, q := range []string{
			`INSERT INTO platform_effects SELECT * FROM platform_effects WHERE type = 'spend' LIMIT 1`,
			`INSERT INTO platform_spend SELECT * FROM platform_spend LIMIT 1`,
		} {
			if _, err := d.Exec(q); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { beforeDemoCheck = nil })
	code, out, _ := cli(t, "demo", "--dir", filepath.Join(t.TempDir(), "demo"), "--units", "40", "--crashes", "1")
	if code != exitFindings {
		t.Fatalf("demo over a platform with a line applied twice: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{"FAILED:", "1 line applied more than once", fmt.Sprintf("spend %d cents, the book %d", spendOf(40)+demo.Cents(1), spendOf(40))} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoRefusesADirectoryThatHoldsAPlatformDatabase(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "platform.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "demo", "--dir", dir, "--units", "10")
	if code != exitUsage || !strings.Contains(errOut, "platform.db already exists") {
		t.Errorf("exit %d, %q; want 2 naming platform.db", code, errOut)
	}
}

func TestTheDemoExplainsBookAndUnitFirstAndPrintsThePlatformsKillMoments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--dir", dir, "--units", "200", "--crashes", "2", "--seed", "5")
	if code != exitOK {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	// Each word is said what it is on the first line that uses it.
	for word, meaning := range map[string]string{"book": "a book is", "unit": "a unit is"} {
		first := regexp.MustCompile(`\b` + word + `s?\b`).FindStringIndex(out)
		if first == nil {
			t.Fatalf("the demo never says %q:\n%s", word, out)
		}
		lineStart := strings.LastIndexByte(out[:first[0]], '\n') + 1
		lineEnd := lineStart + strings.IndexByte(out[lineStart:], '\n')
		if !strings.Contains(out[lineStart:lineEnd], meaning) {
			t.Errorf("the first line to use %q does not say what it is: %q", word, out[lineStart:lineEnd])
		}
	}
	// The platform's kills are planned from the seed and reported when they happen, like the engine's.
	kills := platformKills(5, 200, 2)
	plan := fmt.Sprintf("applied %d and %d lines in all", kills[0], kills[1])
	if !strings.Contains(out, plan) {
		t.Errorf("the demo does not print the platform's kill moments (%q):\n%s", plan, out)
	}
	if !regexp.MustCompile(`(?m)^platform start 1: killed with SIGKILL after \d+ lines applied`).MatchString(out) {
		t.Errorf("no platform kill reported:\n%s", out)
	}
}

func TestTheDemoKeepsItsJournalAsADirectoryOfSegmentsTheCaughtUpPlatformIsRegisteredAtTheEndOf(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--dir", dir, "--units", "200", "--crashes", "1", "--segment-size", "8192")
	if code != exitOK {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	segs, err := journal.SegmentsOf(filepath.Join(dir, "journal"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("the journal directory holds %d segments (%v), want several", len(segs), err)
	}
	if !strings.Contains(out, fmt.Sprintf("journal segments              %d (sealed at 8192 bytes)", len(segs))) {
		t.Errorf("the summary does not count the %d segments:\n%s", len(segs), out)
	}
	m := regexp.MustCompile(`platform's position\s+byte (\d+) of (\d+), registered as reader`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Errorf("the summary does not show the platform registered at the journal's end: %q\n%s", m, out)
	}
}

func TestDemoRefusesADirectoryThePlatformCannotFollowAndCreatesNothing(t *testing.T) {
	parent := t.TempDir()
	for _, name := range []string{"esc\x1b[2J", "bad\xff"} {
		dir := filepath.Join(parent, name)
		code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--units", "2", "--crashes", "0")
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "outbox demo: ") {
			t.Errorf("--dir %q: exit %d, stdout %q, stderr %q; want exit 2 and one line", dir, code, out, errOut)
		}
		checkNothingATerminalActsOn(t, "stderr", errOut)
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("--dir %q was created (%v)", dir, err)
		}
	}
}

func TestDemoRefusesADirectoryItCannotWriteInAndCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		// Root writes in a read-only directory: take one nobody can create a file in.
		f.Close()
		os.Remove(f.Name())
		dir = "/proc/self"
	}
	before, _ := os.ReadDir(dir)
	code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--units", "2", "--crashes", "0")
	if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "outbox demo: ") {
		t.Errorf("--dir %s: exit %d, stdout %q, stderr %q; want exit 2 and one line", dir, code, out, errOut)
	}
	if dir != "/proc/self" {
		if after, _ := os.ReadDir(dir); len(after) != len(before) {
			t.Errorf("--dir %s: %d entries before, %d after", dir, len(before), len(after))
		}
	}
}

func TestDemoOutputIsTerminalSafe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bidi\u202egnp.exe")
	code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--units", "2", "--crashes", "0")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	checkNothingATerminalActsOn(t, "demo's stdout", out)
	checkNothingATerminalActsOn(t, "demo's stderr", errOut)
}

// A directory a demo with --sink nats already ran in holds the embedded server's store, whose
// stream still has that demo's lines, and its stream.jsonl: a second demo there must be refused as
// a used directory, not run and report lines counted twice.
func TestDemoWithTheEmbeddedServerRefusesADirectoryAnotherDemoUsed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	if code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--sink", "nats", "--units", "3", "--crashes", "0"); code != exitOK {
		t.Fatalf("first demo: exit %d\n%s%s", code, out, errOut)
	}
	for _, f := range []string{"book.db", "journal", "platform.db"} {
		os.Remove(filepath.Join(dir, f))
	}
	store := fileDigest(t, filepath.Join(dir, "stream.jsonl"))
	code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--sink", "nats", "--units", "3", "--crashes", "0")
	if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("second demo: exit %d, stdout %q, stderr %q; want exit 2 naming what exists", code, out, errOut)
	}
	if fileDigest(t, filepath.Join(dir, "stream.jsonl")) != store {
		t.Errorf("stream.jsonl was rewritten")
	}
}

func TestDemoRefusesADirectoryWhoseJournalDirectoryIsTooLongForThePlatformsSourceName(t *testing.T) {
	parent, err := filepath.Abs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Short enough for the stream's file (its name has no prefix), one byte too long for
	// "journal:" + DIR/journal.
	n := inbox.MaxSourceNameLen - len(inboxseam.JournalSourcePrefix) - len("/journal") + 1 - len(parent) - 1
	var b strings.Builder
	for n-b.Len() > 201 {
		b.WriteString(strings.Repeat("d", 200) + "/")
	}
	if rest := n - b.Len(); rest == 201 {
		b.WriteString(strings.Repeat("d", 100) + "/" + strings.Repeat("d", 100))
	} else {
		b.WriteString(strings.Repeat("d", rest))
	}
	dir := filepath.Join(parent, b.String())
	if len(inboxseam.JournalSourcePrefix)+len(filepath.Join(dir, "journal")) != inbox.MaxSourceNameLen+1 {
		t.Fatalf("setup: journal source name of %d bytes", len(inboxseam.JournalSourcePrefix)+len(filepath.Join(dir, "journal")))
	}
	code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--units", "2", "--crashes", "0")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "longer than") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 saying the path is too long", code, out, errOut)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("--dir was created (%v)", err)
	}
}

// The demo's engine and platform are child processes, both given these arguments and environment:
// a password in the server's URL must not be on their command lines, which any user of the machine
// can read, but in their environment.
func TestTheDemoGivesItsEngineTheServersPasswordInItsEnvironmentNotOnItsCommandLine(t *testing.T) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nf := addNATSFlags(fs, "the server")
	if err := fs.Parse([]string{"--nats", "nats://alice:s3cret@127.0.0.1:4222", "--subject-prefix", "book"}); err != nil {
		t.Fatal(err)
	}
	args, env := natsEngineArgs(nf, "EVENTS")
	if joined := strings.Join(args, " "); strings.Contains(joined, "s3cret") || strings.Contains(joined, "alice") {
		t.Errorf("the engine's arguments carry the credentials: %q", args)
	}
	if !strings.Contains(strings.Join(args, " "), "--subject-prefix book") {
		t.Errorf("the engine's arguments lost the subject prefix: %q", args)
	}
	if len(env) != 1 || env[0] != demoNATSURLEnv+"=nats://alice:s3cret@127.0.0.1:4222" {
		t.Errorf("the engine's environment: %q", env)
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

func TestTheDemoMakesEveryPlannedKillOfTheEngineHoweverLateItReadsTheReports(t *testing.T) {
	// The demo reads nothing of each start for a while, as on a loaded machine: an engine left to run
	// meanwhile would be through the book before the unit it was to be killed at was read.
	afterEngineStart = func() { time.Sleep(time.Second) }
	t.Cleanup(func() { afterEngineStart = nil })
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--dir", dir, "--units", "30", "--crashes", "2", "--seed", "3")
	if code != exitOK {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"starts                        3 (2 killed with SIGKILL)", "units announced exactly once  30 of 30", "OK: nothing lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// Each kill at the very unit the seed planned.
	plan := regexp.MustCompile(`killed when it reports unit (\d+) and (\d+) done`).FindStringSubmatch(out)
	if plan == nil {
		t.Fatalf("no plan of the engine's kills in:\n%s", out)
	}
	for i, at := range plan[1:] {
		if want := fmt.Sprintf("start %d (", i+1); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `[^)]*\): killed with SIGKILL at unit ` + at + `$`).MatchString(out) {
			t.Errorf("start %d was not killed at unit %s:\n%s", i+1, at, out)
		}
	}
}
