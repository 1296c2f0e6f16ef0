// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/inboxseam"
	ojs "github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// engineCommand is the hidden subcommand the demo re-executes this binary with: one start of the
// simulated engine.
const engineCommand = "__demo-engine"

func init() {
	commands["demo"] = command{
		summary: "simulate an engine working a book, kill it K times, and check the journal",
		run:     runDemo,
	}
	hidden[engineCommand] = command{run: runEngine}
}

const demoAbout = `
Simulates an engine working through a book of N units, and the platform that reads its
journal. The engine runs as a child process (this binary, re-executed) with a fresh run id
per start: it recovers what earlier starts left, writes its run_started handshake, announces
every unit the database says is done, then works the rest, each unit one transaction
(units, spend, and a spend event), each finished unit announced once, while a relay projects
to the journal. The demo kills it with SIGKILL K times, at units drawn from the seed,
restarting it each time. Beside it, the platform (another child) follows the journal through
an inbox into a database of its own, counting each unit once from its unit_done line and
summing the spend; it too is killed with SIGKILL, up to K times, once it has applied a
number of lines drawn from the seed, and restarted. When the book is done, the platform
catches up to the journal's end. The demo then checks the journal against the book, and the
platform's database against both, each file read for itself: every line of every run applied
once, none skipped, the platform's units and spend the book's. DIR keeps book.db, journal/ and
platform.db for inspection. The journal is a directory of segments (DIR/journal), small ones
(--segment-size) so that a demo fills several; the platform registers its position with it as
the journal's reader, and the summary shows both (outbox journal status DIR/journal says more).
With --sink nats the relay projects to a JetStream stream instead (a server started in
DIR/nats when --nats is not given); the stream, written to DIR/stream.jsonl, is checked, and
the platform reads the stream itself (jetstream.FollowStream, its stream position committed
with its effects), killed and restarted as above, with a final catch-up (jetstream.ApplyStream)
to the stream's end; its database is checked against the stream's lines as against a journal.

Exit status: 0 when every guarantee held, 1 when one did not, 2 on a usage error.`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "outbox demo [--dir DIR] [--units N] [--crashes K] [--seed S] [--segment-size BYTES] [--sink KIND [--nats URL | --context NAME] [--stream NAME] [--subject-prefix PREFIX]]", demoAbout)
	dir := fs.String("dir", "", "work in `dir` (default: a new temporary directory)")
	units := fs.Int("units", 2000, "the book's size: `n` units")
	crashes := fs.Int("crashes", 3, "kill the engine, and the platform, with SIGKILL `k` times each")
	seed := fs.Uint64("seed", 1, "draw the moments of the kills from the seed `s`")
	sinkKind := fs.String("sink", "file", "project to a journal directory (`kind` file) or to JetStream (nats)")
	segSize := fs.Int64("segment-size", demoSegmentSize, "seal the journal's segments at `bytes` (small, so that the demo shows several)")
	streamName := fs.String("stream", "EVENTS", "with --sink nats: the stream's `name`; on a server of yours it must be empty")
	nf := addNATSFlags(fs, "with --sink nats: the server's `url` (default: start one in DIR, on loopback)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "outbox demo", "takes no arguments")
	}
	if *units < 2 || *crashes < 0 || *crashes >= *units {
		return usageError(stderr, "outbox demo", "need --units of at least 2 and 0 <= --crashes < --units")
	}
	if *segSize <= 0 {
		return usageError(stderr, "outbox demo", "--segment-size must be positive")
	}
	if *sinkKind != "file" && *sinkKind != "nats" {
		return usageError(stderr, "outbox demo", "--sink is file or nats, not %s", quote(*sinkKind))
	}
	if *sinkKind == "file" && (nf.chosen() || nf.given("subject-prefix")) {
		return usageError(stderr, "outbox demo", "the NATS flags need --sink nats")
	}
	nf.embedded = true
	if p := nf.problem(); p != "" {
		return usageError(stderr, "outbox demo", "%s", p)
	}
	if *dir != "" {
		if p := unfollowable(*dir); p != "" {
			return fail(stderr, exitUsage, "demo: --dir %s: %s, so the platform could not follow the journal in it", quote(*dir), p)
		}
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "outbox-demo-")
		if err != nil {
			return fail(stderr, exitUsage, "demo: %v", err)
		}
		*dir = d
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fail(stderr, exitUsage, "demo: %v", err)
	}
	dbPath, jPath := filepath.Join(*dir, "book.db"), filepath.Join(*dir, "journal")
	platformDB := filepath.Join(*dir, "platform.db")
	used := []string{dbPath, jPath, platformDB}
	if *sinkKind == "nats" {
		// The stream written out, and the embedded server's store: a stream left there by an
		// earlier demo still holds its lines, which this one would count as its own.
		used = append(used, filepath.Join(*dir, "stream.jsonl"))
		if !nf.chosen() {
			used = append(used, filepath.Join(*dir, "nats"))
		}
	}
	for _, p := range used {
		if _, err := os.Stat(p); err == nil {
			return fail(stderr, exitUsage, "demo: %s already exists; give an empty --dir", quote(p))
		}
	}
	// The engine and the platform would each fail on their own, after the demo started, and the
	// demo would report a broken guarantee (exit 1) for what is a directory it cannot use.
	if probe, err := os.CreateTemp(*dir, ".outbox-demo-probe-"); err != nil {
		return fail(stderr, exitUsage, "demo: --dir %s: cannot create a file in it: %v", quote(*dir), errors.Unwrap(err))
	} else {
		probe.Close()
		os.Remove(probe.Name())
	}
	sinkArgs := []string{"--journal", jPath, "--segment-size", strconv.FormatInt(*segSize, 10)}
	var engineEnv []string
	checked := jPath
	if *sinkKind == "nats" {
		if !nf.chosen() {
			url, stop, err := embeddedNATS(ctx, *dir, *streamName, nf.prefix)
			if err != nil {
				return fail(stderr, exitUsage, "demo: %v", err)
			}
			defer stop()
			nf.url = url
		} else if err := requireEmptyStream(ctx, nf, *streamName); err != nil {
			return fail(stderr, exitUsage, "demo: %v", err)
		}
		sinkArgs, engineEnv = natsEngineArgs(nf, *streamName)
		checked = filepath.Join(*dir, "stream.jsonl")
		fmt.Fprintf(stdout, "demo: projecting to stream %s at %s\n", quote(*streamName), nf.server())
	}
	// The two words every later line uses, said before they are.
	fmt.Fprint(stdout, "demo: a book is an engine's job, kept in one SQLite database (book.db); a unit is one step of\n"+
		"demo: that job, done in one transaction that records the unit's spend and enqueues a spend event, a finished\n"+
		"demo: unit announced once (unit_done). The relay projects the events to the journal; the platform reads\n"+
		"demo: them into a database of its own (platform.db), counting units and spend.\n")
	fmt.Fprintf(stdout, "demo: a book of %d units in %s, %s, seed %d\n", *units, quote(*dir), crashCount(*crashes), *seed)

	// The units at which the engine is killed: distinct, increasing, inside the book.
	rng := rand.New(rand.NewPCG(*seed, 0x64656d6f))
	killAt := rng.Perm(*units - 1)[:*crashes]
	for i := range killAt {
		killAt[i]++
	}
	slices.Sort(killAt)
	platKills := platformKills(*seed, *units, *crashes)
	if *crashes > 0 {
		fmt.Fprintf(stdout, "demo: the engine is killed when it reports unit %s done; the platform when its starts have\n"+
			"demo: applied %s lines in all\n", joinInts(killAt), joinInts(platKills))
	}
	fmt.Fprintln(stdout)

	// The platform's starts run beside the engine's and report their kills as they happen.
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(stdout, format, a...)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(stderr, exitUsage, "demo: %v", err)
	}
	plat := &platform{exe: exe, dbPath: platformDB, source: []string{"--journal-dir", jPath}, stderr: stderr,
		killAt: platKills, say: say}
	if *sinkKind == "nats" {
		// The platform reads what the engine's relay reads into: the stream, through the same
		// connection flags, its URL in the environment.
		plat.source, plat.env = sinkArgs, engineEnv
	}
	engineDone := make(chan struct{})
	followed := make(chan error, 1)
	go func() { followed <- plat.follow(ctx, engineDone) }()
	stopFollowing := sync.OnceValue(func() error {
		close(engineDone)
		return <-followed
	})
	defer stopFollowing()
	began := time.Now()
	starts, killed := 0, 0
	for {
		starts++
		target := 0
		if killed < len(killAt) {
			target = killAt[killed]
		}
		runID := fmt.Sprintf("demo-%d-%d-%d", *seed, starts, time.Now().UnixNano())
		reached, status, err := startEngine(ctx, exe, dbPath, sinkArgs, engineEnv, *units, runID, target, stderr)
		if err != nil {
			return fail(stderr, exitFindings, "demo: start %d: %v", starts, err)
		}
		if status == "killed" {
			killed++
			say("start %d (%s): killed with SIGKILL at unit %d\n", starts, runID, reached)
			continue
		}
		say("start %d (%s): finished the book\n", starts, runID)
		break
	}

	if err := stopFollowing(); err != nil {
		return fail(stderr, exitFindings, "demo: %v", err)
	}
	if *sinkKind == "nats" {
		if err := streamToFile(ctx, nf, *streamName, checked); err != nil {
			return fail(stderr, exitFindings, "demo: read the stream: %v", err)
		}
	}
	if err := plat.catchUp(ctx); err != nil {
		return fail(stderr, exitFindings, "demo: %v", err)
	}
	if beforeDemoCheck != nil {
		beforeDemoCheck(*dir)
	}
	res, err := demo.Check(ctx, dbPath, checked, *units, "")
	if err != nil {
		return fail(stderr, exitFindings, "demo: check: %v", err)
	}
	pres, err := demo.CheckPlatform(ctx, platformDB, dbPath, checked)
	if err != nil {
		return fail(stderr, exitFindings, "demo: check the platform: %v", err)
	}
	gaps, conflicts, malformed := 0, 0, 0
	switch {
	case errors.Is(res.VerifyErr, journal.ErrStreamGap):
		gaps = 1
	case errors.Is(res.VerifyErr, journal.ErrPayloadConflict):
		conflicts = 1
	case errors.Is(res.VerifyErr, journal.ErrMalformed):
		malformed = 1
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "starts\t%d (%d killed with SIGKILL)\n", starts, killed)
	fmt.Fprintf(tw, "runs in the journal\t%d\n", len(res.Report.Runs))
	fmt.Fprintf(tw, "lines\t%d\n", res.Report.Lines)
	fmt.Fprintf(tw, "duplicates skipped\t%d\n", res.Report.Duplicates)
	fmt.Fprintf(tw, "gaps\t%d\n", gaps)
	fmt.Fprintf(tw, "conflicts\t%d\n", conflicts)
	if malformed > 0 {
		fmt.Fprintf(tw, "malformed lines\t%d\n", malformed)
	}
	fmt.Fprintf(tw, "units announced exactly once\t%d of %d\n", res.Announced, res.Units)
	fmt.Fprintf(tw, "spend in the journal\t%d cents, in the database %d cents\n", res.SpendJournal, res.SpendDB)
	fmt.Fprintf(tw, "database integrity\t%s\n", res.Integrity)
	if *sinkKind == "file" {
		journalRows(ctx, tw, jPath, *segSize)
	}
	fmt.Fprintf(tw, "time\t%v\n", time.Since(began).Round(10*time.Millisecond))
	tw.Flush()
	fmt.Fprintf(stdout, "%s\n", platformLine(pres, *units, plat))
	fmt.Fprintf(stdout, "\nbook: %s\njournal: %s\nplatform database: %s\n", quote(dbPath), quote(checked), quote(platformDB))
	if !res.OK() || !pres.OK() {
		fmt.Fprintf(stdout, "\nFAILED: %s\n", problems(res, pres))
		return exitFindings
	}
	fmt.Fprintln(stdout, "\nOK: nothing lost, nothing counted twice")
	return exitOK
}

// joinInts lists numbers as "1, 2 and 3".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// demoSegmentSize is the demo's segment size: a book of the default size fills about seven.
const demoSegmentSize = 64 << 10

// journalRows adds the journal directory's shape to the demo's summary: its segments, and the
// position the platform registered as the journal's reader, which is what retention keeps lines for.
func journalRows(ctx context.Context, tw io.Writer, dir string, segSize int64) {
	st, err := journal.Status(ctx, dir)
	if err != nil {
		fmt.Fprintf(tw, "journal segments\t%s\n", quote(err.Error()))
		return
	}
	fmt.Fprintf(tw, "journal segments\t%d (sealed at %s), %s in all\n", st.Segments, plural(segSize, "byte"), plural(st.End-st.First, "byte"))
	for _, r := range st.Readers {
		fmt.Fprintf(tw, "platform's position\tbyte %d of %d, registered as reader %s\n", r.Position, st.End, quote(r.Name))
	}
}

// beforeDemoCheck, when set, is called with the demo's directory before its checks: a test changes
// the files there to prove that the checks find it.
var beforeDemoCheck func(dir string)

// afterEngineStart, when set, is called once a start of the engine is running, before its reports
// are read: a test stalls the demo there, as a loaded machine can.
var afterEngineStart func()

// startEngine runs one start of the engine and, when killAt > 0, kills it with SIGKILL once it
// reports that many units done. It returns the last unit count the engine reported and "killed" or
// "finished".
//
// The engine waits for each report to be read before its next unit (--ack): a kill planned at a
// unit is then made at that unit however late the demo reads. Left to run ahead, an engine whose
// reports the demo read late (a loaded machine) could finish the book before the report of the
// unit it was to be killed at was read, and the kill the seed planned would not be made.
func startEngine(ctx context.Context, exe, dbPath string, sinkArgs, env []string, units int, runID string, killAt int, stderr io.Writer) (int, string, error) {
	args := append([]string{engineCommand, "--db", dbPath, "--units", strconv.Itoa(units), "--run", runID, "--ack"}, sinkArgs...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, "", err
	}
	ack, err := cmd.StdinPipe()
	if err != nil {
		return 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	if afterEngineStart != nil {
		afterEngineStart()
	}
	reached := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "done "))
		if err == nil {
			reached = n
		}
		if killAt > 0 && reached >= killAt {
			cmd.Process.Signal(syscall.SIGKILL)
			break
		}
		if err == nil {
			// An engine that has ended cannot read it: its end is what the scan finds next.
			ack.Write([]byte{'\n'})
		}
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return reached, "finished", nil
	case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		return reached, "killed", nil
	}
	return reached, "", fmt.Errorf("engine %s: %w", runID, err)
}

// natsEngineArgs gives the engine child's arguments and environment for projecting to stream. The
// server's URL, which may carry a password, goes in the environment, not on the command line, where
// any user of the machine could read it.
func natsEngineArgs(nf *natsFlags, stream string) (args, env []string) {
	child := *nf
	child.url = ""
	args = append([]string{"--stream", stream}, child.args(false)...)
	if nf.url != "" {
		env = []string{demoNATSURLEnv + "=" + nf.url}
	}
	return args, env
}

// demoNATSURLEnv carries the server's URL from the demo to its engine.
const demoNATSURLEnv = "OUTBOX_DEMO_NATS_URL"

// runEngine is one start of the simulated engine, in the child process. It reports "done N" on
// standard output after each unit.
func runEngine(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(engineCommand, "outbox "+engineCommand+" --db FILE --journal DIR [--segment-size BYTES] --units N --run ID [--ack] [--nats URL --stream NAME]",
		"One start of the demo's engine, run by outbox demo in a child process.")
	dbPath := fs.String("db", "", "the database `file`")
	jPath := fs.String("journal", "", "the journal's `dir`ectory")
	segSize := fs.Int64("segment-size", demoSegmentSize, "seal the journal's segments at `bytes`")
	units := fs.Int("units", 0, "the book's size: `n` units")
	runID := fs.String("run", "", "this start's run `id`")
	streamName := fs.String("stream", "", "with --nats: the stream's `name`")
	ack := fs.Bool("ack", false, "after each unit's report, wait for a line on standard input before the next unit")
	nf := addNATSFlags(fs, "project to the JetStream server at `url` instead of the journal")
	if _, code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	acks := bufio.NewReader(os.Stdin)
	if u := os.Getenv(demoNATSURLEnv); u != "" && nf.url == "" {
		nf.url = u
	}
	cfg := demo.EngineConfig{
		DB: *dbPath, Journal: *jPath, SegmentSize: *segSize, Units: *units, RunID: *runID,
		Progress: func(done int) {
			fmt.Fprintf(stdout, "done %d\n", done)
			if *ack {
				if _, err := acks.ReadString('\n'); err != nil {
					cancel() // the demo is gone: no one is reading the reports
				}
			}
		},
	}
	if nf.chosen() {
		cfg.OpenSink = func(context.Context) (outbox.Sink, func() error, error) { return nf.openSink(*streamName) }
	}
	err := demo.RunEngine(ctx, cfg)
	if err != nil {
		return fail(stderr, exitFindings, "demo: engine %s: %v", quote(*runID), err)
	}
	return exitOK
}

// requireEmptyStream refuses a stream of someone else's that already holds lines: the check that ends
// the demo reads the whole stream.
func requireEmptyStream(ctx context.Context, nf *natsFlags, name string) error {
	js, closeConn, err := nf.connect()
	if err != nil {
		return err
	}
	defer closeConn()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("stream %s at %s: %w", name, nf.server(), err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != 0 {
		return fmt.Errorf("stream %s at %s holds %s; the demo needs an empty one", name, nf.server(), plural(int64(info.State.Msgs), "message"))
	}
	return nil
}

// streamToFile writes the stream's lines to path, so the demo checks them as it checks a journal.
func streamToFile(ctx context.Context, nf *natsFlags, name, path string) error {
	js, closeConn, err := nf.connect()
	if err != nil {
		return err
	}
	defer closeConn()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := ojs.WriteLines(ctx, js, name, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// crashCount says "1 crash" or "N crashes".
func crashCount(n int) string {
	if n == 1 {
		return "1 crash"
	}
	return strconv.Itoa(n) + " crashes"
}

// unfollowable says why the platform's inbox would refuse the journal in dir as a source (a source's
// name is its absolute path, after "journal:" for the journal directory: valid UTF-8, no control
// byte, at most inbox.MaxSourceNameLen bytes), or "" when it would not.
func unfollowable(dir string) string {
	abs, err := filepath.Abs(filepath.Join(dir, "stream.jsonl"))
	if err != nil {
		return err.Error()
	}
	journalDir, err := filepath.Abs(filepath.Join(dir, "journal"))
	if err != nil {
		return err.Error()
	}
	switch {
	case !utf8.ValidString(abs):
		return "its path is not valid UTF-8"
	case len(abs) > inbox.MaxSourceNameLen || len(inboxseam.JournalSourcePrefix)+len(journalDir) > inbox.MaxSourceNameLen:
		return fmt.Sprintf("its path is longer than %d bytes", inbox.MaxSourceNameLen-len(inboxseam.JournalSourcePrefix)-len("/journal"))
	}
	for i := 0; i < len(abs); i++ {
		if c := abs[i]; c < 0x20 || c == 0x7f {
			return fmt.Sprintf("its path holds control byte 0x%02x", c)
		}
	}
	return ""
}
