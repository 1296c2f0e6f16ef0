// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// The steps of a trim and of a reader's key write a child process kills itself at. Trim's steps
// are its test hook's names ("recorded": a run's removal recorded in the readers' bucket, nothing
// removed; "purged": removed; "capmark": the cap's mark written, nothing removed by it); a reader's
// are just before it writes its key (after its inbox committed, or before a session reads) and just
// after.
const (
	pointTrimRecorded   = "trim.recorded"
	pointTrimPurged     = "trim.purged"
	pointTrimCapMark    = "trim.capmark"
	pointBeforeRegister = "reader.before_register"
	pointAfterRegister  = "reader.after_register"
)

// armStreamPoints routes Trim's and the readers' test hooks to the fault points crashtest kills at.
func armStreamPoints() {
	crashtest.ArmFromEnv()
	jetstream.SetTrimStep(func(step string) error { faultpoint.Hit("trim." + step); return nil })
	jetstream.SetRegisterStep(func(step string) { faultpoint.Hit("reader." + step) })
}

// connectChild connects a child process to the servers in NATS_URLS, reconnecting for ever.
func connectChild() (njs.JetStream, error) {
	nc, err := nats.Connect(os.Getenv("NATS_URLS"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	return njs.New(nc)
}

// streamTrimmer runs Trim on EVENTS in a loop, keep 0 and the cap MAX_BYTES, as outbox stream trim
// --every does, until it is killed. A pass that fails (a leader's failover) is met by the next.
func streamTrimmer() int {
	armStreamPoints()
	js, err := connectChild()
	if err != nil {
		fmt.Fprintln(os.Stderr, "trimmer:", err)
		return 1
	}
	maxBytes, _ := strconv.ParseUint(os.Getenv("MAX_BYTES"), 10, 64)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _ = jetstream.Trim(ctx, js, "EVENTS", jetstream.WithKeep(0), jetstream.WithMaxBytes(maxBytes))
		cancel()
		time.Sleep(20 * time.Millisecond)
	}
}

// ledgerLine is what the campaign's handler reads of a line: the amount the engine booked.
type ledgerLine struct {
	Data struct {
		Cents int64 `json:"cents"`
	} `json:"data"`
}

// streamReader follows EVENTS into the inbox DB under the reader name NAME until it is killed; its
// effects go to a table without a key, so that a line applied twice would show.
func streamReader() int {
	ctx := context.Background()
	armStreamPoints()
	in, err := inbox.Open(ctx, os.Getenv("DB"), inbox.WithReaderName(os.Getenv("NAME")), inbox.WithBatchLines(7),
		inbox.WithPollInterval(20*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		return 1
	}
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(ledgerTable)
		return err
	}); err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		return 1
	}
	js, err := connectChild()
	if err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		return 1
	}
	err = jetstream.FollowStream(ctx, js, "EVENTS", in, ledgerHandler)
	fmt.Fprintln(os.Stderr, "reader:", err)
	return 1
}

const ledgerTable = `CREATE TABLE IF NOT EXISTS ledger (run TEXT NOT NULL, seq INTEGER NOT NULL, cents INTEGER NOT NULL)`

func ledgerHandler(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
	var l ledgerLine
	if err := json.Unmarshal(ev.Line, &l); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO ledger (run, seq, cents) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, l.Data.Cents)
	return err
}

// killStep arms a child to kill itself at the at-th pass of point.
type killStep struct {
	point string
	at    int
}

// supervisor keeps one child process of a role running: each start takes the next step of its plan
// (or none, once the plan is done) and is started again when it kills itself there.
type supervisor struct {
	role string
	env  []string
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	plan  []killStep
	kills map[string]int
	err   error
}

func supervise(t *testing.T, role string, env []string, plan []killStep, kills map[string]int) *supervisor {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &supervisor{role: role, env: env, plan: slices.Clone(plan), kills: kills,
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop(exe)
	return s
}

func (s *supervisor) loop(exe string) {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		env := append(slices.Clone(os.Environ()), "OUTBOX_TEST_CHILD="+s.role)
		env = append(env, s.env...)
		s.mu.Lock()
		var armed killStep
		if len(s.plan) > 0 {
			armed = s.plan[0]
			env = append(env, crashtest.KillAt(armed.point, armed.at)...)
		}
		s.mu.Unlock()
		cmd := execChild(exe, env)
		if err := cmd.Start(); err != nil {
			s.fail(err)
			return
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if !crashtest.Killed(err) || armed.point == "" {
				s.fail(fmt.Errorf("%s %v ended: %v", s.role, s.env, err))
				return
			}
			s.mu.Lock()
			s.plan = s.plan[1:]
			s.mu.Unlock()
			killsMu.Lock()
			s.kills[armed.point]++
			killsMu.Unlock()
		case <-s.stop:
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			return
		}
	}
}

// execChild is crashtest.Child for a goroutine, which may not fail the test: env is the whole
// environment, the role in it.
func execChild(exe string, env []string) *exec.Cmd {
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	return cmd
}

// killsMu guards the kill counts the supervisors keep.
var killsMu sync.Mutex

func countKills(kills map[string]map[string]int) string {
	killsMu.Lock()
	defer killsMu.Unlock()
	return fmt.Sprint(kills)
}

func (s *supervisor) planLeft() []killStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.plan)
}

func (s *supervisor) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// halt kills the child and returns what is left of the plan, for a supervisor that takes over.
func (s *supervisor) halt(t *testing.T) []killStep {
	t.Helper()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.plan
}

// planDone says whether every start the plan armed has killed itself.
func (s *supervisor) planDone(t *testing.T) bool {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		t.Fatal(s.err)
	}
	return len(s.plan) == 0
}

// trimCampaignSeeds is how many plans the trim campaign runs: OUTBOX_TRIM_SEEDS, one by default.
func trimCampaignSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_TRIM_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// TestATrimmedClusterWhoseTrimmerAndReadersAreKilledAtEveryStepLosesNothingAndStaysUnderItsCap runs
// three in-process servers with a three-replica stream, an engine's book with its relays in this
// process, and as real processes a trimmer (Trim in a loop, keep 0, a cap) and two readers following
// the stream into inboxes of their own. The trimmer is SIGKILLed at each step of a trim (a run's
// removal recorded, done), each reader just before and just after writing its key (at the start of
// a session and after a commit); the second reader is stopped for a while; the stream's leader is
// shut down once. Lines are enqueued in chunks, each once the stream has room under the cap for it,
// until every planned kill happened and at least twice the cap passed through the stream. Then:
// both readers applied exactly the book's lines, their totals the book's; the stream's bytes,
// sampled throughout, never exceeded the cap, which never had to act. Last, the second reader is
// held while a third run goes on, the trimmer killed where it writes the cap's mark; the cap removes
// what the held reader had not applied, and the held reader stops with a capped retention gap
// naming the run it lost, while the first applied everything. OUTBOX_TRIM_SEEDS sets how many plans
// run (one by default).
func TestATrimmedClusterWhoseTrimmerAndReadersAreKilledAtEveryStepLosesNothingAndStaysUnderItsCap(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster and real trimmer and reader processes")
	}
	for seed := 1; seed <= trimCampaignSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { trimCampaign(t, uint64(seed)) })
	}
}

// The cap, the lines a chunk enqueues, and a bound of a message's size in the stream (a line of the
// campaign is about 130 bytes, its subject and headers under 100 more).
const (
	campaignCap   = 32 << 10
	campaignChunk = 10
	campaignMsgAt = 512
)

type campaign struct {
	t        *testing.T
	ctx      context.Context
	bookPath string
	js       njs.JetStream
	store    *outbox.Store
	enq      map[string]int // lines enqueued per run
	relays   []chan error
	stopR    context.CancelFunc
	rctx     context.Context
	sink     *jetstream.Sink

	mu       sync.Mutex
	sampling bool
	maxBytes uint64
	samples  int
	perMsg   uint64 // the largest mean size of a message sampled
	lastSeq  uint64
}

// passed is about how many bytes went through the stream so far.
func (c *campaign) passed() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastSeq * c.perMsg
}

func trimCampaign(t *testing.T, seed uint64) {
	ctx := context.Background()
	began := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0x7472696d))
	servers, js := startCluster(t)
	var urls []string
	for _, srv := range servers {
		urls = append(urls, srv.ClientURL())
	}
	st := createR3(t, js)
	bookPath := filepath.Join(t.TempDir(), "book.db")
	store, err := outbox.Open(ctx, bookPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rctx, stopRelays := context.WithCancel(ctx)
	c := &campaign{t: t, ctx: ctx, bookPath: bookPath, js: js, store: store, enq: map[string]int{}, rctx: rctx, stopR: stopRelays,
		sink: sinkWhenUp(t, js, jetstream.WithMinReplicas(3))}
	defer c.stopRelays()
	samplerDone := c.sample()
	defer samplerDone()

	dir := t.TempDir()
	common := []string{"NATS_URLS=" + strings.Join(urls, ",")}
	readerEnv := func(name string) []string {
		return append(slices.Clone(common), "NAME="+name, "DB="+filepath.Join(dir, name+".db"))
	}
	readerPlan := func() []killStep {
		p := []killStep{{pointBeforeRegister, 1}, {pointAfterRegister, 1},
			{pointBeforeRegister, 2 + rng.IntN(4)}, {pointAfterRegister, 2 + rng.IntN(4)}}
		rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		return p
	}
	kills := map[string]map[string]int{"trimmer": {}, "one": {}, "two": {}}
	trimmerEnv := append(slices.Clone(common), "MAX_BYTES="+strconv.Itoa(campaignCap))
	trimmer := supervise(t, "stream-trimmer", trimmerEnv, []killStep{{pointTrimRecorded, 1}, {pointTrimPurged, 1},
		{pointTrimRecorded, 1 + rng.IntN(3)}, {pointTrimPurged, 1 + rng.IntN(3)}}, kills["trimmer"])
	one := supervise(t, "stream-reader", readerEnv("one"), readerPlan(), kills["one"])
	two := supervise(t, "stream-reader", readerEnv("two"), readerPlan(), kills["two"])
	c.waitRegistered("one", 0)
	c.waitRegistered("two", 0)
	t.Logf("%v: the cluster, the stream and the processes are up", time.Since(began).Round(time.Millisecond))

	// The first part: the cap never has to act.
	c.startRun("run-1")
	stopTwoAt, twoStopped := 4+rng.IntN(4), false
	leaderAt := 8 + rng.IntN(6)
	var twoPlan []killStep
	for chunk := 0; ; chunk++ {
		if chunk == 300 {
			t.Fatalf("after 300 chunks: the plans left trimmer %v, one %v, two %v", trimmer.planLeft(), one.planLeft(), two.planLeft())
		}
		if chunk >= 20 && c.passed() >= 2*campaignCap && !twoStopped &&
			trimmer.planDone(t) && one.planDone(t) && two.planDone(t) {
			break
		}
		if chunk == stopTwoAt {
			twoPlan, twoStopped = two.halt(t), true
			t.Logf("stopped reader two at chunk %d", chunk)
		}
		if chunk == stopTwoAt+5 {
			two, twoStopped = supervise(t, "stream-reader", readerEnv("two"), twoPlan, kills["two"]), false
			t.Logf("started reader two again at chunk %d", chunk)
		}
		if chunk == leaderAt {
			leader := leaderOf(t, st)
			servers[leader].Shutdown()
			t.Logf("%v: shut down the stream leader %s at chunk %d", time.Since(began).Round(time.Millisecond), leader, chunk)
		}
		if chunk == 15 {
			c.startRun("run-2")
		}
		c.waitRoom()
		c.enqueue(campaignChunk)
	}
	c.waitProjected()
	c.waitRegistered("one", c.info().State.LastSeq)
	c.waitRegistered("two", c.info().State.LastSeq)
	c.mu.Lock()
	maxBytes, samples := c.maxBytes, c.samples
	c.sampling = false
	c.mu.Unlock()
	last := c.info().State.LastSeq
	t.Logf("%v: first part: %d lines, about %d bytes, through the stream; its bytes at most %d of the cap's %d over %d samples; kills %s",
		time.Since(began).Round(time.Millisecond), last, c.passed(), maxBytes, campaignCap, samples, countKills(kills))
	if maxBytes > campaignCap {
		t.Errorf("the stream held %d bytes, over its cap of %d", maxBytes, campaignCap)
	}
	if capped, err := jetstream.CappedBelow(ctx, js, "EVENTS"); err != nil || capped != 0 {
		t.Errorf("the cap acted while every reader kept up: below %d (%v)", capped, err)
	}
	// Every start a plan armed killed itself (the loop ends only then): count the steps.
	killsMu.Lock()
	for who, points := range map[string][]string{"trimmer": {pointTrimRecorded, pointTrimPurged},
		"one": {pointBeforeRegister, pointAfterRegister}, "two": {pointBeforeRegister, pointAfterRegister}} {
		for _, p := range points {
			if kills[who][p] < 2 {
				t.Errorf("%s killed %d times at %s, want 2", who, kills[who][p], p)
			}
		}
	}
	killsMu.Unlock()

	// The second part: reader two applies the first lines of run-3 and is held; run-3 goes on
	// and ends, run-4 goes on until the cap has removed all of run-3.
	trimmer.halt(t)
	trimmer = supervise(t, "stream-trimmer", trimmerEnv, []killStep{{pointTrimCapMark, 1}, {pointTrimCapMark, 1}}, kills["trimmer"])
	c.startRun("run-3")
	c.enqueue(campaignChunk)
	c.waitProjected()
	c.waitRegistered("one", c.info().State.LastSeq)
	held := c.waitRegistered("two", c.info().State.LastSeq)
	two.halt(t)
	c.waitRegistered("one", c.info().State.LastSeq)
	c.enqueue(3 * campaignChunk)
	c.waitProjected()
	run3Last := c.info().State.LastSeq
	c.startRun("run-4")
	for chunk := 0; ; chunk++ {
		if chunk == 300 {
			t.Fatalf("after 300 more chunks the cap has not removed run-3 (to %d) past reader two (at %d), or the trimmer's plan %v is left",
				run3Last, held, trimmer.planLeft())
		}
		capped, err := jetstream.CappedBelow(ctx, js, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if capped > run3Last && trimmer.planDone(t) {
			break
		}
		// Reader one keeps up, so that what the cap takes is only what reader two holds.
		c.waitRegistered("one", c.info().State.LastSeq)
		c.enqueue(campaignChunk)
	}
	c.waitProjected()
	c.waitRegistered("one", c.info().State.LastSeq)
	c.waitUnderCap()
	trimmer.halt(t)
	one.halt(t)
	c.stopRelays()
	if kills["trimmer"][pointTrimCapMark] == 0 {
		t.Error("the trimmer was never killed where it writes the cap's mark")
	}

	// Reader one: everything the book holds, each line once, the book's totals.
	c.checkLedger("one", filepath.Join(dir, "one.db"), nil)
	// Reader two: stops with the cap's gap, naming the run it lost, and holds what it applied.
	in := openInbox(t, filepath.Join(dir, "two.db"), inbox.WithReaderName("two"))
	_, err = jetstream.ApplyStream(ctx, js, "EVENTS", in, ledgerHandler)
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) || !gap.Capped || gap.Position != held {
		t.Fatalf("reader two held past the cap: %v, want a capped retention gap at %d", err, held)
	}
	if !slices.Contains(gap.RunsGone, "run-3") {
		t.Errorf("the gap names %q, not run-3, whose later lines it lost", gap.RunsGone)
	}
	in.Close()
	applied := c.checkLedger("two", filepath.Join(dir, "two.db"), map[string]bool{"run-3": true, "run-4": true})
	if applied["run-3"] >= c.enq["run-3"] {
		t.Errorf("reader two applied %d of run-3's %d lines, want fewer", applied["run-3"], c.enq["run-3"])
	}
	t.Logf("%v: seed %d: kills %s; reader two stopped: %v", time.Since(began).Round(time.Millisecond), seed, countKills(kills), gap)
}

// startRun starts a relay projecting run from the book into the stream.
func (c *campaign) startRun(run string) {
	r := outboxtest.NewRelay(c.t, c.store, c.sink, run, outbox.WithBatchSize(8),
		outbox.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	done := make(chan error, 1)
	go func() { done <- r.Run(c.rctx) }()
	c.relays = append(c.relays, done)
	c.enq[run] = 0
}

func (c *campaign) stopRelays() {
	c.stopR()
	for _, done := range c.relays {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			c.t.Errorf("relay: %v", err)
		}
	}
	c.relays = nil
}

// enqueue books n lines on the newest run, each an amount.
func (c *campaign) enqueue(n int) {
	run := fmt.Sprintf("run-%d", len(c.relays))
	for range n {
		c.enq[run]++
		data := map[string]int64{"cents": demo.Cents(c.enq[run])}
		if _, err := c.store.EnqueueEvent(c.ctx, run, journal.Builder(run, "spend", data)); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *campaign) waitProjected() {
	for run, n := range c.enq {
		outboxtest.WaitProjected(c.t, c.store, run, int64(n), 2*time.Minute)
	}
}

// info is the stream's state, asked again through a failover.
func (c *campaign) info() *njs.StreamInfo {
	c.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		st, err := c.js.Stream(ctx, "EVENTS")
		var info *njs.StreamInfo
		if err == nil {
			info, err = st.Info(ctx)
		}
		cancel()
		if err == nil {
			return info
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the stream's state: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sample records the stream's largest size while sampling is on, every 10 ms.
func (c *campaign) sample() (stop func()) {
	c.sampling = true
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			st, err := c.js.Stream(ctx, "EVENTS")
			cancel()
			if err != nil {
				continue // a failover: the next sample
			}
			state := st.CachedInfo().State
			c.mu.Lock()
			if c.sampling {
				c.maxBytes, c.samples = max(c.maxBytes, state.Bytes), c.samples+1
			}
			if state.Msgs > 0 {
				c.perMsg = max(c.perMsg, state.Bytes/state.Msgs)
			}
			c.lastSeq = max(c.lastSeq, state.LastSeq)
			c.mu.Unlock()
		}
	}()
	return func() { close(done); <-ended }
}

// waitRoom waits until the stream has room under the cap for a chunk: the relays projected what was
// enqueued (a relay held up by a failover would otherwise publish several chunks at once), and the
// trimmer removed what the readers applied.
func (c *campaign) waitRoom() {
	c.t.Helper()
	c.waitProjected()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if c.info().State.Bytes+campaignChunk*campaignMsgAt <= campaignCap {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the stream holds %d bytes after two minutes: no room under the cap of %d", c.info().State.Bytes, campaignCap)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *campaign) waitUnderCap() {
	c.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if b := c.info().State.Bytes; b <= campaignCap {
			return
		} else if time.Now().After(deadline) {
			c.t.Fatalf("the stream holds %d bytes after two minutes, over its cap of %d", b, campaignCap)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRegistered waits until reader name is registered at seq or after, and returns its position.
func (c *campaign) waitRegistered(name string, seq uint64) uint64 {
	c.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		rs, err := jetstream.Readers(ctx, c.js, "EVENTS")
		cancel()
		for _, r := range rs {
			if r.Name == name && r.Seq >= seq {
				return r.Seq
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("reader %s not registered at %d or after within two minutes: %+v (%v)", name, seq, rs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkLedger compares a reader's ledger with the book: each run's lines 1..n once, with the book's
// amounts, n the book's count, or, for a run in partial, as many as the reader applied. It returns
// the lines applied per run.
func (c *campaign) checkLedger(name, db string, partial map[string]bool) map[string]int {
	c.t.Helper()
	d := outboxtest.RawDB(c.t, db)
	rows, err := d.Query(`SELECT run, seq, cents FROM ledger ORDER BY run, seq`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][]int64{}
	cents := map[string]int64{}
	for rows.Next() {
		var run string
		var seq, ct int64
		if err := rows.Scan(&run, &seq, &ct); err != nil {
			c.t.Fatal(err)
		}
		got[run] = append(got[run], seq)
		cents[run] += ct
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	in, err := inbox.Open(c.ctx, db)
	if err != nil {
		c.t.Fatal(err)
	}
	if q, err := in.Quarantined(c.ctx); err != nil || len(q) != 0 {
		c.t.Errorf("reader %s quarantined %+v (%v)", name, q, err)
	}
	in.Close()
	applied := map[string]int{}
	for run, n := range c.enq {
		st, err := c.store.Run(c.ctx, run)
		if err != nil {
			c.t.Fatal(err)
		}
		if st.LastSeq != int64(n) || st.ProjectedTotal != int64(n) {
			c.t.Fatalf("the book's figures of %s: %+v, %d lines enqueued", run, st, n)
		}
		want := n
		if partial[run] {
			want = len(got[run])
		}
		// The amounts booked on the lines the reader should hold (the book forgets a line's row once
		// it is projected; its figures count them).
		var bookCents int64
		for seq := 1; seq <= want; seq++ {
			bookCents += demo.Cents(seq)
		}
		if !slices.Equal(got[run], seqs(1, int64(want))) {
			c.t.Errorf("reader %s applied %s's seqs %v, want 1..%d each once", name, run, got[run], want)
		}
		if cents[run] != bookCents {
			c.t.Errorf("reader %s's total of %s is %d cents, the book's %d", name, run, cents[run], bookCents)
		}
		applied[run] = len(got[run])
	}
	return applied
}
