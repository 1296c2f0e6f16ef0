// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
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
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// The life cycle's journal: tiny segments, no keep, and a cap of a few segments, so that a
// campaign of a few hundred lines rolls, seals, indexes and trims many times.
const (
	lcSegment = 64 << 10
	lcCap     = 4 * lcSegment
	// lcCheckpoint: a checkpoint of the last segment every 8 KiB, several a segment, where the
	// default (16 MiB) would never write one in segments this small.
	lcCheckpoint = 8 << 10
	// lcPad makes a line about 600 bytes: a hundred lines fill a segment.
	lcPad = 560
)

func lcOpenJournal(dir string) (*journal.Journal, error) {
	return journal.Open(dir, journal.WithSegmentSize(lcSegment), journal.WithCheckpointEvery(lcCheckpoint),
		journal.WithKeep(0), journal.WithMaxBytes(lcCap))
}

// lifecycleEngine runs one start of an engine whose relay appends to a segmented journal: recover
// what earlier starts left (forgetting their projected rows in bounded steps), then enqueue LINES
// events while the relay projects them, then flush. Killed when told (crashtest.KillAt).
func lifecycleEngine() int {
	crashtest.ArmFromEnv()
	if err := runLifecycleEngine(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle engine:", err)
		return 1
	}
	return 0
}

func runLifecycleEngine(ctx context.Context) (err error) {
	run := os.Getenv("RUN")
	lines, _ := strconv.Atoi(os.Getenv("LINES"))
	s, err := outbox.Open(ctx, os.Getenv("DB"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	j, err := lcOpenJournal(os.Getenv("JDIR"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, j.Close()) }()
	// Off, so that each start's Recover forgets the earlier runs' projected rows in chunks.
	relay, err := outbox.NewRelay(s, j, run, outbox.WithBatchSize(crashBatch), outbox.WithForgetProjected(false),
		outbox.WithBackoff(time.Millisecond, 50*time.Millisecond))
	if err != nil {
		return err
	}
	if err := relay.Recover(ctx); err != nil {
		return err
	}
	if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	pad := strings.Repeat("x", lcPad)
	for i := 1; i < lines; i++ {
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "tick", map[string]any{"i": i, "pad": pad})); err != nil {
			cancel()
			<-done
			return err
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		return err
	}
	return relay.Flush(ctx)
}

// lifecycleConsumer runs one start of a consumer: an inbox reading the journal directory under its
// own reader name, recording each line it applies in a table with no key (so that a line applied
// twice shows). With FOLLOW=1 it follows until its standard input ends; otherwise it applies to the
// end. A retention gap is written, as JSON, to GAPS and ends it with status 3.
func lifecycleConsumer() int {
	crashtest.ArmFromEnv()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := os.Getenv("FOLLOW") == "1"
	if follow {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	err := runLifecycleConsumer(ctx, follow)
	if follow && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	var gap *inbox.JournalGapError
	if errors.As(err, &gap) {
		b, _ := json.Marshal(gap)
		f, ferr := os.OpenFile(os.Getenv("GAPS"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if ferr == nil {
			_, ferr = f.Write(append(b, '\n'))
			ferr = errors.Join(ferr, f.Sync(), f.Close())
		}
		if ferr != nil {
			fmt.Fprintln(os.Stderr, "lifecycle consumer: record the gap:", ferr)
			return 1
		}
		return 3
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle consumer:", err)
		return 1
	}
	return 0
}

func runLifecycleConsumer(ctx context.Context, follow bool) (err error) {
	in, err := inbox.Open(ctx, os.Getenv("DB"), inbox.WithReaderName(os.Getenv("NAME")),
		inbox.WithBatchLines(8), inbox.WithPollInterval(20*time.Millisecond))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS applied (run TEXT NOT NULL, seq INTEGER NOT NULL)`)
		return err
	}); err != nil {
		return err
	}
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq) VALUES (?, ?)`, ev.RunID, ev.Seq)
		return err
	}
	if follow {
		return in.FollowJournal(ctx, os.Getenv("JDIR"), h)
	}
	_, err = in.ApplyJournal(ctx, os.Getenv("JDIR"), h)
	return err
}

// The steps the engine is killed at: each step of a roll (the seal's index before, under its
// temporary name, in place; the next segment created), each step of the last segment's checkpoint
// (before it, under its temporary name, in place), each step of a retention delete, the retention
// record, a bounded step of forgetting, the write path's own, and a start's migration of an older
// book between two of its steps.
var lcEnginePoints = []string{"journal.before_index", "journal.index_tmp", "journal.after_index", "journal.after_roll",
	"journal.before_checkpoint", "journal.checkpoint_tmp", "journal.after_checkpoint",
	"journal.trim_locked", "journal.trim_recorded", "journal.trim_segment", "journal.trim_index", "journal.state_tmp",
	faultpoint.ForgetStep, faultpoint.AfterCommit, faultpoint.RelayAfterAppend, faultpoint.JournalMidWrite,
	faultpoint.MigrationStep}

// The steps a consumer is killed at: before and after its commit, between two batches, and while
// its reader file is written (synced under the temporary name, not renamed).
var lcConsumerPoints = []string{faultpoint.InboxBeforeCommit, faultpoint.InboxAfterCommit,
	faultpoint.InboxBetweenBatches, "journal.reader_tmp"}

type lcCampaign struct {
	t                *testing.T
	rng              *rand.Rand
	seed             int
	dir, jdir        string
	book, mirror     string
	starts           int
	kills            map[string]int
	consumerStarts   int
	gaps             map[string][]inbox.JournalGapError // per consumer
	accepted         map[string][]inbox.Quarantine      // the gaps each consumer's runs were given up for
	lines            int
	followName, held string
}

func (c *lcCampaign) consumerEnv(name string) []string {
	return []string{"DB=" + filepath.Join(c.dir, name+".db"), "JDIR=" + c.jdir, "NAME=" + name,
		"GAPS=" + filepath.Join(c.dir, name+".gaps")}
}

// engine runs one engine start, killed at the at-th pass of point ("" for none), and then copies
// every segment into the mirror: a start writes less than the cap, so each segment is copied after
// it is sealed and before retention can delete it, and the mirror is the whole journal ever written.
// A start killed at a migration step opens an older book: the book is migrated down first (see
// olderBook), and at is then chosen among the steps up.
func (c *lcCampaign) engine(point string, at int) {
	c.t.Helper()
	var from, pass int64
	if point == faultpoint.MigrationStep {
		from, pass = c.olderBook()
		at = int(pass)
	}
	c.starts++
	env := []string{"DB=" + c.book, "JDIR=" + c.jdir, "LINES=" + strconv.Itoa(c.lines),
		fmt.Sprintf("RUN=lc-%d-%d", c.seed, c.starts)}
	if point != "" {
		env = append(env, crashtest.KillAt(point, at)...)
	}
	err := crashtest.Child(c.t, "lifecycle-engine", env...).Run()
	switch {
	case crashtest.Killed(err):
		c.kills[point]++
	case err != nil:
		c.t.Fatalf("engine start %d (killed at %s #%d): %v", c.starts, point, at, err)
	}
	if point == faultpoint.MigrationStep {
		// Killed between two steps up: the book is at the version of the last one committed, and
		// the next start takes it on from there.
		if v := c.bookVersion(); v != from+pass {
			c.t.Fatalf("an older book at version %d, killed after %d steps up, is at version %d", from, pass, v)
		}
	}
	c.copyMirror()
}

// olderBook migrates the book down, as the goose CLI would for a rollback to an older release, to
// a version that keeps every run's position (2 or later: version 1 has none, and a start then stops
// with ErrBookBehind), at least two steps below the latest, and returns that version and a pass of
// the migration step to be killed at that leaves at least one step to the next start.
func (c *lcCampaign) olderBook() (from, pass int64) {
	c.t.Helper()
	known := migrations.Known()
	latest := known[len(known)-1]
	from = 2 + c.rng.Int64N(latest-3)
	pass = 1 + c.rng.Int64N(latest-from-1)
	d := outboxtest.RawDBRW(c.t, c.book)
	defer d.Close()
	p, err := migrations.NewProvider(d)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := p.DownTo(context.Background(), from); err != nil {
		c.t.Fatalf("migrate the book down to %d: %v", from, err)
	}
	if v := c.bookVersion(); v != from {
		c.t.Fatalf("the book migrated down to %d is at version %d", from, v)
	}
	return from, pass
}

// bookVersion is the last migration the book records as applied.
func (c *lcCampaign) bookVersion() int64 {
	c.t.Helper()
	d := outboxtest.RawDB(c.t, c.book)
	defer d.Close()
	applied, err := migrations.Applied(context.Background(), d)
	if err != nil || len(applied) == 0 {
		c.t.Fatalf("the book's versions: %v, %v", applied, err)
	}
	return applied[len(applied)-1]
}

func (c *lcCampaign) copyMirror() {
	c.t.Helper()
	names, err := filepath.Glob(filepath.Join(c.jdir, "*.jsonl"))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			c.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.mirror, filepath.Base(n)), b, 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
}

// consumer is a running consumer start.
type lcConsumer struct {
	name  string
	point string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

func (c *lcCampaign) startConsumer(name string, follow bool, point string, at int) *lcConsumer {
	c.t.Helper()
	c.consumerStarts++
	env := c.consumerEnv(name)
	if follow {
		env = append(env, "FOLLOW=1")
	}
	if point != "" {
		env = append(env, crashtest.KillAt(point, at)...)
	}
	p := &lcConsumer{name: name, point: point, cmd: crashtest.Child(c.t, "lifecycle-consumer", env...), done: make(chan error, 1)}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

// end waits for a consumer start (closing its standard input first when stop is set) and records
// how it ended; it reports whether the start stopped at a retention gap.
func (c *lcCampaign) end(p *lcConsumer, stop bool) (gap bool) {
	c.t.Helper()
	if stop {
		p.stdin.Close()
	}
	var err error
	select {
	case err = <-p.done:
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		<-p.done
		c.t.Fatalf("consumer %s did not end within two minutes", p.name)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case crashtest.Killed(err):
		if p.point == "" {
			c.t.Fatalf("an unarmed start of consumer %s died of SIGKILL", p.name)
		}
		c.kills[p.point]++
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return true
	default:
		c.t.Fatalf("consumer %s armed at %q: %v", p.name, p.point, err)
	}
	return false
}

// settle brings consumer name to the journal's end, killing it at point on the way, and takes each
// retention gap it meets as an operator would: accept it, then give up each run it quarantined for a
// gap. What was accepted is recorded, to be compared with what the consumer lacks.
func (c *lcCampaign) settle(name, point string) {
	c.t.Helper()
	for range 50 {
		at := 2 + c.rng.IntN(6)
		if point == "" {
			at = 0
		}
		p := c.startConsumer(name, false, point, at)
		gap := c.end(p, false)
		point = ""
		ctx := context.Background()
		in, err := inbox.Open(ctx, filepath.Join(c.dir, name+".db"), inbox.WithReaderName(name))
		if err != nil {
			c.t.Fatal(err)
		}
		progress := gap
		if gap {
			c.readGaps(name)
			if err := in.AcceptRetentionGap(ctx, c.jdir, "the crash campaign holds this consumer past the cap"); err != nil {
				c.t.Fatalf("accept the retention gap of %s: %v", name, err)
			}
		}
		qs, err := in.Quarantined(ctx)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, q := range qs {
			if q.Reason != "gap" {
				c.t.Fatalf("consumer %s quarantined run %s for a %s: %s", name, q.RunID, q.Reason, q.Detail)
			}
			if err := in.AcceptGap(ctx, q.RunID, "lost with the retention gap"); err != nil {
				c.t.Fatal(err)
			}
			c.accepted[name] = append(c.accepted[name], q)
			progress = true
		}
		if err := in.Close(); err != nil {
			c.t.Fatal(err)
		}
		if !progress && p.point == "" {
			return
		}
	}
	c.t.Fatalf("consumer %s did not settle in 50 starts", name)
}

func (c *lcCampaign) readGaps(name string) {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, name+".gaps"))
	if err != nil {
		c.t.Fatal(err)
	}
	var all []inbox.JournalGapError
	for l := range bytes.Lines(b) {
		var g inbox.JournalGapError
		if err := json.Unmarshal(l, &g); err != nil {
			c.t.Fatal(err)
		}
		all = append(all, g)
	}
	c.gaps[name] = all
}

type lcKey struct {
	run string
	seq int64
}

// mirrorLines reads the mirror, the whole journal ever written, as the journal-wide position each
// line begins at and its (run, seq).
func (c *lcCampaign) mirrorLines() (pos []int64, keys []lcKey) {
	c.t.Helper()
	names, err := filepath.Glob(filepath.Join(c.mirror, "*.jsonl"))
	if err != nil {
		c.t.Fatal(err)
	}
	slices.Sort(names)
	for _, n := range names {
		base, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(n), ".jsonl"), 10, 64)
		if err != nil {
			c.t.Fatal(err)
		}
		b, err := os.ReadFile(n)
		if err != nil {
			c.t.Fatal(err)
		}
		off := base
		for l := range bytes.Lines(b) {
			if !bytes.HasSuffix(l, []byte("\n")) {
				break // a torn tail the next start cut
			}
			var v struct {
				Run string `json:"engine_run_id"`
				Seq int64  `json:"seq"`
			}
			if err := json.Unmarshal(l, &v); err != nil {
				c.t.Fatalf("mirror %s at %d: %v", n, off, err)
			}
			pos = append(pos, off)
			keys = append(keys, lcKey{v.Run, v.Seq})
			off += int64(len(l))
		}
	}
	return pos, keys
}

// applied reads what a consumer applied: how many times each (run, seq).
func (c *lcCampaign) applied(name string) map[lcKey]int {
	c.t.Helper()
	d, err := sql.Open("sqlite3", "file:"+filepath.Join(c.dir, name+".db")+"?mode=ro")
	if err != nil {
		c.t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.Query(`SELECT run, seq FROM applied`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	got := map[lcKey]int{}
	for rows.Next() {
		var k lcKey
		if err := rows.Scan(&k.run, &k.seq); err != nil {
			c.t.Fatal(err)
		}
		got[k]++
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return got
}

// TestEveryStepOfALongLifeKilledLosesNothingSilentlyAndAHeldConsumerIsToldWhatItLost runs the whole
// life of a segmented journal with retention as real processes: an engine (store and relay into a
// journal of 64 KiB segments, no keep, a cap of four segments), a consumer following it and one held
// back for a while and resumed, each under its own reader name. The engine is killed at each step of
// a roll, a seal and its index, the last segment's checkpoint, a retention delete, its record, a
// bounded step of forgetting, the write path and a start migrating an older book up; the consumers at each step of applying and of writing their reader file. Then an
// independent reader compares, per run, what each consumer applied with what the book says was
// enqueued: nothing applied twice, nothing missing but what a retention gap named, and the held
// consumer told, by an ErrRetentionGap naming the runs, exactly the lines the cap took from it.
func TestEveryStepOfALongLifeKilledLosesNothingSilentlyAndAHeldConsumerIsToldWhatItLost(t *testing.T) {
	t.Parallel()
	for seed := 1; seed <= crashSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			dir := t.TempDir()
			c := &lcCampaign{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x6c6966656379636c)), seed: seed, dir: dir,
				jdir: filepath.Join(dir, "journal"), book: filepath.Join(dir, "book.db"), mirror: filepath.Join(dir, "mirror"),
				kills: map[string]int{}, gaps: map[string][]inbox.JournalGapError{}, accepted: map[string][]inbox.Quarantine{},
				lines: 150, followName: "follower", held: "held"}
			for _, d := range []string{c.jdir, c.mirror} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			engine := slices.Clone(lcEnginePoints)
			c.rng.Shuffle(len(engine), func(i, j int) { engine[i], engine[j] = engine[j], engine[i] })
			consumer := slices.Clone(lcConsumerPoints)

			// Both readers are registered before the first line is written, as an operator sets up a
			// journal with retention: a segment no registered reader holds is deleted at once.
			for _, name := range []string{c.followName, c.held} {
				if err := journal.SetReader(c.jdir, name, 0); err != nil {
					t.Fatal(err)
				}
			}
			c.engine("", 0)
			c.settle(c.followName, "")
			c.settle(c.held, "")
			heldFrom, heldTo := 2, 2+len(engine)/2 // the rounds the held consumer does not read
			for i, point := range engine {
				at := 1
				switch point {
				case faultpoint.AfterCommit, faultpoint.RelayAfterAppend, faultpoint.JournalMidWrite:
					at = 1 + c.rng.IntN(c.lines/2)
				case "journal.before_checkpoint", "journal.checkpoint_tmp", "journal.after_checkpoint":
					// A start writes about ten checkpoints.
					at = 1 + c.rng.IntN(6)
				}
				cp := consumer[i%len(consumer)]
				f := c.startConsumer(c.followName, true, cp, 2+c.rng.IntN(8))
				c.engine(point, at)
				if c.end(f, true) {
					t.Fatalf("the following consumer met a retention gap")
				}
				// A follower killed early is brought to the end before the next start, so that it
				// never lags by more than a start's lines, well under the cap.
				c.settle(c.followName, "")
				// A step not reached (a trim needs a segment every reader passed, or a journal
				// over the cap) is reached by more starts, each growing the journal by a segment
				// and more.
				for k := 0; k < 4 && c.kills[point] == 0; k++ {
					c.settle(c.followName, "")
					c.engine(point, 1)
				}
				if i == heldTo-1 {
					// Held for long enough that the cap takes segments it has not read,
					// whatever the starts before were killed at.
					for range lcCap/lcSegment + 1 {
						c.engine("", 0)
						c.settle(c.followName, "")
					}
				}
				if i < heldFrom || i >= heldTo {
					c.settle(c.held, consumer[(i+1)%len(consumer)])
				}
			}
			c.engine("", 0) // finishes the book: every pending line projected
			c.settle(c.followName, "")
			c.settle(c.held, "")
			// Each consumer step was reached by a start armed at it: settle until it is.
			for _, cp := range consumer {
				for range 5 {
					if c.kills[cp] > 0 {
						break
					}
					c.engine("", 0)
					c.settle(c.followName, cp)
					c.settle(c.held, "")
				}
			}
			c.check()
		})
	}
}

func (c *lcCampaign) check() {
	t := c.t
	ctx := context.Background()
	s, err := outbox.Open(ctx, c.book)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	book := map[string]int64{} // run: its last seq, every seq up to it enqueued
	var enqueued int64
	for r, err := range s.AllRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		book[r.RunID] = r.LastSeq
	}
	tot, err := s.Totals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, last := range book {
		enqueued += last
	}
	// AllRuns leaves out runs whose rows are all forgotten; the mirror holds every run's lines, so
	// the runs it names that the listing does not are read from the journal's own record of them.
	pos, keys := c.mirrorLines()
	for _, k := range keys {
		if k.seq > book[k.run] {
			book[k.run] = k.seq
		}
	}
	enqueued = 0
	for _, last := range book {
		enqueued += last
	}
	if tot.EnqueuedTotal != enqueued || tot.ProjectedTotal != enqueued || tot.Pending != 0 {
		t.Errorf("the book's totals: %d enqueued, %d projected, %d pending; the runs' last seqs add up to %d",
			tot.EnqueuedTotal, tot.ProjectedTotal, tot.Pending, enqueued)
	}

	for _, name := range []string{c.followName, c.held} {
		got := c.applied(name)
		// What a gap took: the lines whose bytes lay between the position the consumer held and
		// the first retained segment.
		lost := map[lcKey]bool{}
		for _, g := range c.gaps[name] {
			from := max(g.Position, 0)
			for i, p := range pos {
				if p >= from && p < g.First {
					lost[keys[i]] = true
				}
			}
		}
		var missing []lcKey
		for run, last := range book {
			var perRun int64
			for seq := int64(1); seq <= last; seq++ {
				k := lcKey{run, seq}
				switch n := got[k]; {
				case n > 1:
					t.Errorf("consumer %s applied run %s seq %d %d times", name, run, seq, n)
				case n == 0:
					missing = append(missing, k)
					if !lost[k] {
						t.Errorf("consumer %s lacks run %s seq %d, which no retention gap named", name, run, seq)
					}
				default:
					perRun++
				}
			}
			if lostRun := countLost(lost, got, run); perRun+lostRun != last {
				t.Errorf("consumer %s: run %s applied %d and lost %d of %d", name, run, perRun, lostRun, last)
			}
		}
		// Every run a gap named lost exactly the seqs it named, and the seqs given up by AcceptGap
		// are exactly those missing of a run the consumer went on with.
		for _, g := range c.gaps[name] {
			for _, r := range g.RunsLost {
				for seq := r.FirstSeq; seq <= r.LastSeq; seq++ {
					if got[lcKey{r.RunID, seq}] != 0 {
						t.Errorf("consumer %s: the gap named run %s seq %d lost, and it was applied", name, r.RunID, seq)
					}
				}
			}
		}
		// And each line missing is in a run a gap named with that seq, unless a gap said it named
		// only some of the runs.
		for _, k := range missing {
			named, partial := false, false
			for _, g := range c.gaps[name] {
				partial = partial || g.RunsLostMore > 0
				for _, r := range g.RunsLost {
					named = named || (r.RunID == k.run && r.FirstSeq <= k.seq && k.seq <= r.LastSeq)
				}
			}
			if !named && !partial {
				t.Errorf("consumer %s lacks run %s seq %d, which no gap named among the runs lost", name, k.run, k.seq)
			}
		}
		for _, q := range c.accepted[name] {
			for seq := q.Expected; seq < q.Got; seq++ {
				if !lost[lcKey{q.RunID, seq}] {
					t.Errorf("consumer %s gave up run %s seq %d, which no gap took", name, q.RunID, seq)
				}
			}
		}
		if name == c.followName && (len(missing) > 0 || len(c.gaps[name]) > 0) {
			t.Errorf("the following consumer met %d gaps and lacks %d lines", len(c.gaps[name]), len(missing))
		}
		if name == c.held && len(c.gaps[name]) == 0 {
			t.Errorf("the held consumer was never held past the cap")
		}
		t.Logf("consumer %s: %d gaps, %d runs given up, %d lines missing (all named)", name, len(c.gaps[name]), len(c.accepted[name]), len(missing))
	}
	for _, p := range append(slices.Clone(lcEnginePoints), lcConsumerPoints...) {
		if c.kills[p] == 0 {
			t.Errorf("no process was killed at %s", p)
		}
	}
	t.Logf("%d engine starts, %d consumer starts, kills %v, %d runs, %d lines enqueued, %d lines written",
		c.starts, c.consumerStarts, c.kills, len(book), enqueued, len(keys))
}

// countLost counts the run's lines a gap took and the consumer did not get otherwise.
func countLost(lost map[lcKey]bool, got map[lcKey]int, run string) int64 {
	var n int64
	for k := range lost {
		if k.run == run && got[k] == 0 {
			n++
		}
	}
	return n
}
