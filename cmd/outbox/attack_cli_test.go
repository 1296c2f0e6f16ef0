// SPDX-License-Identifier: Apache-2.0

package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/textmachine/outbox/inbox"
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

func TestStreamCreateUsageErrorsNameStreamCreate(t *testing.T) {
	for _, args := range [][]string{
		{"stream", "create", "--bogus"},
		{"stream", "create", "--json", "--nats", "nats://127.0.0.1:1", "--stream", "S"},
		{"stream", "create"},
		{"stream", "create", "extra", "--nats", "nats://127.0.0.1:1", "--stream", "S"},
		{"stream", "create", "--nats", "nats://127.0.0.1:1", "--stream", "S", "--replicas", "9"},
		{"stream", "--nats", "nats://127.0.0.1:1", "--stream", "S", "create", "extra"},
	} {
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.HasPrefix(errOut, "outbox stream create: ") || !strings.HasSuffix(errOut, "(run 'outbox stream create --help')\n") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line from outbox stream create", args, code, errOut)
		}
	}
	if code, _, errOut := cli(t, "stream", "delete"); code != exitUsage || !strings.HasPrefix(errOut, "outbox stream: ") {
		t.Errorf("stream delete: exit %d, stderr %q", code, errOut)
	}
}

func TestMetricsWithAnEmptyListenSaysTheAddressIsMissing(t *testing.T) {
	dbPath := emptyBook(t)
	code, _, errOut := cli(t, "metrics", "--db", dbPath, "--listen", "")
	if code != exitUsage || !strings.HasPrefix(errOut, "outbox metrics: --listen needs an address") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// An operator who forgets --nats, or puts the URL after the wrong flag, must not see the password
// printed back: not in an error, not in the JSON.
func TestAServerURLGivenInTheWrongPlaceIsNotPrintedWithItsPassword(t *testing.T) {
	const secret = "s3cretPW"
	url := "nats://alice:" + secret + "@127.0.0.1:1"
	dbPath := emptyBook(t)
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"verify", url},
		{"verify", "--json", url},
		{"verify", "--stream", "EVENTS", url},
		{"verify", "--context", url, "--stream", "EVENTS"},
		{"check", "--db", dbPath, "--journal", url},
		{"check", "--db", dbPath, "--journal", url, "--json"},
		{"check", "--db", url, "--journal", url, "--json"},
		{"relay", "--db", url, "--journal", "j.jsonl"},
		{"stream", "create", "--stream", "EVENTS", url},
		{"stream", "create", "--nats", url, "--stream", "EVENTS", "--replicas", url},
		{"demo", "--sink", url},
		{"stats", "--db", url},
		{"pending", "--db", dbPath, "--run", url},
		{"inbox", "stats", "--db", url},
		{"metrics", "--db", dbPath, "--listen", url},
		{"migrate", url, "--db", dbPath},
		{url},
		{"nats://" + secret + "@127.0.0.1:1"},
		{"verify", "nats://alice:p@" + secret + "@127.0.0.1:1"},
	} {
		code, out, errOut := cli(t, args...)
		if code == exitOK || strings.Contains(out+errOut, secret) {
			t.Errorf("%q: exit %d, the password printed:\n%s%s", args, code, out, errOut)
		}
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Errorf("files created: %v", entries)
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

// relay and retire act on an existing book. Pointed at a file that holds none (an empty file,
// another program's database, a consumer's inbox) they must say so and leave it as it was, not
// migrate the outbox's tables into it, and relay must create no journal beside it.
func TestRelayAndRetireRefuseADatabaseThatHoldsNoBookAndChangeNothing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	d, err := sql.Open("sqlite3", "file:"+other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec(`CREATE TABLE x (a)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	consumer, _ := consumerDB(t)
	for _, db := range []string{empty, other, consumer} {
		before := fileDigest(t, db)
		jPath := filepath.Join(t.TempDir(), "j.jsonl")
		for _, args := range [][]string{
			{"relay", "--db", db, "--journal", jPath},
			{"retire", "--db", db, "--run", "a", "--seq", "1", "--reason", "r"},
		} {
			code, out, errOut := cli(t, args...)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no book") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 saying it holds no book", args, code, out, errOut)
			}
		}
		if fileDigest(t, db) != before {
			t.Errorf("%s was changed", db)
		}
		if _, err := os.Stat(jPath); !os.IsNotExist(err) {
			t.Errorf("relay created the journal beside %s (%v)", db, err)
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(db + suffix); !os.IsNotExist(err) {
				t.Errorf("%s%s created (%v)", db, suffix, err)
			}
		}
	}
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

// migrate up on the platform's database (the wrong file of the two) would add the outbox's tables
// to it, after which the inbox refuses it as a book: the consumer could not start again.
func TestMigrateRefusesAConsumersDatabaseAndChangesNothing(t *testing.T) {
	consumer, _ := consumerDB(t)
	before := fileDigest(t, consumer)
	for _, action := range []string{"up", "down"} {
		code, out, errOut := cli(t, "migrate", action, "--db", consumer)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "consumer's database") {
			t.Errorf("migrate %s: exit %d, stdout %q, stderr %q; want exit 2 naming a consumer's database", action, code, out, errOut)
		}
	}
	if fileDigest(t, consumer) != before {
		t.Errorf("the consumer's database was changed")
	}
	if code, _, errOut := cli(t, "inbox", "stats", "--db", consumer); code != exitOK {
		t.Errorf("inbox stats afterwards: exit %d, %s", code, errOut)
	}
}

// The tombstone carries the SHA-256 and size of the line it replaced. A retire run again on the
// same seq (a command repeated from the shell's history) would replace it with a tombstone of the
// tombstone, and the record of the original's bytes would be gone.
func TestRetireRefusesALineAlreadyRetiredAndKeepsItsTombstone(t *testing.T) {
	dbPath, _ := book(t)
	if code, _, errOut := cli(t, "retire", "--db", dbPath, "--run", "dead", "--seq", "3", "--reason", "bad line"); code != exitOK {
		t.Fatalf("first retire: exit %d, %s", code, errOut)
	}
	_, tombstone, _ := cli(t, "pending", "--db", dbPath, "--run", "dead", "--raw")
	save := filepath.Join(t.TempDir(), "saved")
	code, out, errOut := cli(t, "retire", "--db", dbPath, "--run", "dead", "--seq", "3", "--reason", "again", "--save", save)
	if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "already retired") {
		t.Errorf("second retire: exit %d, stdout %q, stderr %q; want exit 2 saying it is already retired", code, out, errOut)
	}
	if _, after, _ := cli(t, "pending", "--db", dbPath, "--run", "dead", "--raw"); after != tombstone {
		t.Errorf("the tombstone changed:\n%s\nnow\n%s", tombstone, after)
	}
	if _, err := os.Stat(save); !os.IsNotExist(err) {
		t.Errorf("--save wrote %s (%v)", save, err)
	}
}

// A report that could not be written is an I/O error (exit 2, said on standard error), as stats
// says it: `outbox verify j > report` on a full disk must not exit 0 with nothing in report.
func TestVerifyAndCheckExitTwoWhenTheirReportCannotBeWritten(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	full.Close()
	dbPath, jPath := checkedBook(t)
	for _, args := range [][]string{
		{"verify", jPath},
		{"verify", "--json", jPath},
		{"check", "--db", dbPath, "--journal", jPath},
		{"check", "--json", "--db", dbPath, "--journal", jPath},
	} {
		cmd := outboxCmd(t, args...)
		out, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var errOut strings.Builder
		cmd.Stdout, cmd.Stderr = out, &errOut
		cmd.Run()
		out.Close()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.HasPrefix(errOut.String(), "outbox "+args[0]+": ") {
			t.Errorf("%q > /dev/full: exit %d, stderr %q; want 2 naming the write error", args, code, errOut.String())
		}
	}
}

// migrate status and version on the platform's database do not report it as a book with every
// migration pending (which sends the operator to migrate up, which refuses it): they name it a
// consumer's database, exit 2, and change nothing.
func TestMigrateStatusAndVersionNameAConsumersDatabaseAsOne(t *testing.T) {
	consumer, _ := consumerDB(t)
	before := fileDigest(t, consumer)
	for _, action := range []string{"status", "version"} {
		code, out, errOut := cli(t, "migrate", action, "--db", consumer)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "consumer's database") {
			t.Errorf("migrate %s: exit %d, stdout %q, stderr %q; want exit 2 naming a consumer's database", action, code, out, errOut)
		}
	}
	if fileDigest(t, consumer) != before {
		t.Errorf("the consumer's database was changed")
	}
}

func TestDemoRefusesADirectoryWhoseJournalDirectoryIsTooLongForThePlatformsSourceName(t *testing.T) {
	parent, err := filepath.Abs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Short enough for the stream's file (its name has no prefix), one byte too long for
	// "journal:" + DIR/journal.
	n := inbox.MaxSourceNameLen - len(inbox.JournalSourcePrefix) - len("/journal") + 1 - len(parent) - 1
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
	if len(inbox.JournalSourcePrefix)+len(filepath.Join(dir, "journal")) != inbox.MaxSourceNameLen+1 {
		t.Fatalf("setup: journal source name of %d bytes", len(inbox.JournalSourcePrefix)+len(filepath.Join(dir, "journal")))
	}
	code, out, errOut := runOutbox(t, "demo", "--dir", dir, "--units", "2", "--crashes", "0")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "longer than") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 saying the path is too long", code, out, errOut)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("--dir was created (%v)", err)
	}
}
