// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
)

// crashPlatform runs one start of the demo's platform and, when told (crashtest.KillAt), kills itself
// with SIGKILL at a fault point. With FOLLOW=1 it follows the journal until its standard input ends.
func crashPlatform() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	follow := os.Getenv("FOLLOW") == "1"
	if follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	// Small batches, so that a start commits many of them and can die between two; a short poll,
	// so that a start woken by nothing still reaches the journal's end soon.
	err := demo.RunPlatform(ctx, demo.PlatformConfig{DB: os.Getenv("PLATFORM"), Journal: os.Getenv("JOURNAL"),
		Follow: follow, BatchLines: 8, PollInterval: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "platform:", err)
		return 1
	}
	return 0
}

// The steps of Apply a platform start is killed at: before the commit, after it, inside the handler,
// between two batches, and at a moment the parent draws ("timer"). tornTail, the last step, needs a
// torn journal and has a round of its own.
var platformPoints = []string{faultpoint.InboxBeforeCommit, faultpoint.InboxAfterCommit, demo.PlatformHandlerPoint,
	faultpoint.InboxBetweenBatches, "timer"}

const tornTail = faultpoint.InboxTornTail

// platformProc is a running start of the platform.
type platformProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
	timer *time.Timer
}

// startPlatform starts the platform, killed at the at-th pass of point ("timer": after delay; "":
// never).
func startPlatform(t *testing.T, env []string, follow bool, point string, at int, delay time.Duration) *platformProc {
	t.Helper()
	if follow {
		env = append(env, "FOLLOW=1")
	}
	if point != "" && point != "timer" {
		env = append(env, crashtest.KillAt(point, at)...)
	}
	p := &platformProc{cmd: crashtest.Child(t, "crash-platform", env...), done: make(chan error, 1)}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	if point == "timer" {
		p.timer = time.AfterFunc(delay, func() { p.cmd.Process.Kill() })
	}
	return p
}

// stop ends a following start (its standard input closed) and returns how it ended.
func (p *platformProc) stop() error {
	p.stdin.Close()
	err := <-p.done
	if p.timer != nil {
		p.timer.Stop()
	}
	return err
}

// wait waits for the start to end by itself; a start that has not within a minute is a hang.
func (p *platformProc) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s: the platform did not end within a minute", what)
		return nil
	}
}

// runEngineStart runs one start of the engine as planned and reports whether it was killed.
func runEngineStart(t *testing.T, env []string, st start) bool {
	t.Helper()
	if st.point != "" && st.point != "timer" {
		env = append(env, crashtest.KillAt(st.point, st.at)...)
	}
	if st.point == "timer" {
		env = append(env, "PACE=2ms")
	}
	cmd := crashtest.Child(t, "crash-engine", env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if st.point == "timer" {
		timer := time.AfterFunc(st.delay, func() { cmd.Process.Kill() })
		defer timer.Stop()
	}
	err := cmd.Wait()
	switch {
	case err == nil:
		return false
	case crashtest.Killed(err):
		return true
	}
	t.Fatalf("engine start (%s #%d): %v", st.point, st.at, err)
	return false
}

// endsTorn reports whether the journal ends in a line without its newline.
func endsTorn(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(b) > 0 && b[len(b)-1] != '\n'
}

// e2eCampaign is one seed's campaign: a book, its journal, the platform's database, and the kills.
type e2eCampaign struct {
	t                    *testing.T
	rng                  *rand.Rand
	seed, units          int
	db, jpath, committed string
	platformDB           string
	starts               int
	engineKills          int
	platformKills        map[string]int
	queue                []string // the platform's steps still to be killed at
	platformRuns         int
}

func (c *e2eCampaign) engineEnv() []string {
	c.starts++
	return []string{"DB=" + c.db, "JOURNAL=" + c.jpath, "COMMITTED=" + c.committed,
		"UNITS=" + strconv.Itoa(c.units), fmt.Sprintf("RUN=e2e-%d-%d", c.seed, c.starts)}
}

func (c *e2eCampaign) platformEnv() []string {
	c.platformRuns++
	return []string{"PLATFORM=" + c.platformDB, "JOURNAL=" + c.jpath}
}

// armed starts a following platform armed at point (at a pass drawn from the seed, or at the first
// when first is set), or unarmed when point is "".
func (c *e2eCampaign) armed(point string, first bool) *platformProc {
	if point == "" {
		return startPlatform(c.t, c.platformEnv(), true, "", 0, 0)
	}
	at := 1
	if !first {
		at = 1 + c.rng.IntN(4)
		if point == demo.PlatformHandlerPoint {
			at = 1 + c.rng.IntN(24)
		}
	}
	if point == faultpoint.InboxBeforeCommit || point == faultpoint.InboxAfterCommit {
		at++ // a start's first commit is its schema's (WriteTx), not a batch's
	}
	delay := time.Duration(5+c.rng.IntN(150)) * time.Millisecond
	return startPlatform(c.t, c.platformEnv(), true, point, at, delay)
}

// ended records how a platform start armed at point ended: killed there, or stopped before it got
// there, or failed.
func (c *e2eCampaign) ended(point string, err error) {
	c.t.Helper()
	switch {
	case crashtest.Killed(err):
		if point == "" {
			c.t.Fatal("an unarmed platform start died of SIGKILL")
		}
		c.platformKills[point]++
	case err != nil:
		c.t.Fatalf("platform start armed at %q: %v", point, err)
	}
}

// tornRound kills a platform start where it meets the torn line the engine just left.
func (c *e2eCampaign) tornRound() {
	c.t.Helper()
	p := startPlatform(c.t, c.platformEnv(), true, tornTail, 1, 0)
	if err := p.wait(c.t, "at the torn tail"); !crashtest.Killed(err) {
		c.t.Fatalf("the platform start armed at the torn tail ended with %v", err)
	}
	c.platformKills[tornTail]++
}

// round runs one engine start and, at the same time, a following platform start armed at point.
func (c *e2eCampaign) round(st start, point string) {
	c.t.Helper()
	p := c.armed(point, false)
	if runEngineStart(c.t, c.engineEnv(), st) {
		c.engineKills++
	}
	c.ended(point, p.stop())
	if endsTorn(c.t, c.jpath) {
		c.tornRound()
	}
}

// TestEngineRelayAndConsumerKilledTogetherLoseAndRepeatNothing runs the engine with its relay and the
// platform, the journal's reader, as real processes at the same time and kills both with SIGKILL:
// the engine at each point of the write path, the relay and recovery; the platform at every step of
// Apply (before the commit, after it, inside its handler, between two batches, at a drawn moment, and
// while it meets the torn line an engine killed mid-append left). Then an independent reader of the
// book, the journal and the platform's database finds, for every run, each of the journal's distinct
// lines applied exactly once, each run's high-water mark at its last seq, and the platform's totals
// equal to the book's.
func TestEngineRelayAndConsumerKilledTogetherLoseAndRepeatNothing(t *testing.T) {
	t.Parallel()
	const units = 60
	for seed := 1; seed <= crashSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			dir := t.TempDir()
			c := &e2eCampaign{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x6532652d6f7574)), seed: seed, units: units,
				db: filepath.Join(dir, "book.db"), jpath: filepath.Join(dir, "journal.jsonl"),
				committed: filepath.Join(dir, "committed"), platformDB: filepath.Join(dir, "platform.db"),
				platformKills: map[string]int{}}
			points := slices.Clone(platformPoints)
			c.rng.Shuffle(len(points), func(i, j int) { points[i], points[j] = points[j], points[i] })
			for i, st := range crashPlan(c.rng, units) {
				c.round(st, points[i%len(points)])
			}
			// The book is done. A step no platform start was killed at yet (each was stopped before
			// it got there) is reached now for sure: each new engine start writes its handshake
			// line, which the platform applies in a batch of its own.
			for _, point := range points {
				if c.platformKills[point] > 0 {
					continue
				}
				p := c.armed(point, true)
				runEngineStart(t, c.engineEnv(), start{})
				c.ended(point, p.wait(t, "armed at "+point))
			}
			if c.platformKills[tornTail] == 0 {
				// An engine killed in the middle of appending its handshake leaves a torn line.
				if !runEngineStart(t, c.engineEnv(), start{point: faultpoint.JournalMidWrite, at: 1}) || !endsTorn(t, c.jpath) {
					t.Fatal("an engine killed in the middle of its first append left no torn line")
				}
				c.engineKills++
				c.tornRound()
			}
			runEngineStart(t, c.engineEnv(), start{}) // cuts a torn tail; the book is done
			if err := startPlatform(t, c.platformEnv(), false, "", 0, 0).wait(t, "the last start"); err != nil {
				t.Fatalf("the last platform start: %v", err)
			}

			ctx := context.Background()
			book, err := demo.Check(ctx, c.db, c.jpath, units, c.committed)
			if err != nil {
				t.Fatal(err)
			}
			if !book.OK() {
				t.Errorf("the journal against the book: %v", book.Problems())
			}
			plat, err := demo.CheckPlatform(ctx, c.platformDB, c.db, c.jpath)
			if err != nil {
				t.Fatal(err)
			}
			if !plat.OK() {
				t.Errorf("the platform against the journal and the book: %v", plat.Problems())
			}
			if plat.Units != units || plat.Lines != book.Report.Lines || plat.Effects != plat.Lines {
				t.Errorf("the platform applied %d of %d lines and counted %d of %d units", plat.Effects, book.Report.Lines, plat.Units, units)
			}
			for _, point := range append(platformPoints, tornTail) {
				if c.platformKills[point] == 0 {
					t.Errorf("no platform start was killed at %s", point)
				}
			}
			t.Logf("%d engine starts (%d killed), %d platform starts, kills %v, %d runs, %d lines, %d re-sent",
				c.starts, c.engineKills, c.platformRuns, c.platformKills, plat.Runs, plat.Lines, book.Report.Duplicates)
		})
	}
}
