// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// streamConsumer is one start of a platform consumer reading the stream EVENTS into its inbox, its
// effects into a table without a key, so that a line applied twice would show. It follows the
// stream until killed (by the parent at a random moment, or by itself inside a handler after
// KILL_LINES lines, in the middle of a transaction); with APPLY set it applies the stream to its
// end once and exits.
func streamConsumer() int {
	ctx := context.Background()
	in, err := inbox.Open(ctx, os.Getenv("DB"), inbox.WithBatchLines(7))
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE IF NOT EXISTS effects (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL)`)
		return err
	}); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	killAt, _ := strconv.Atoi(os.Getenv("KILL_LINES"))
	lines := 0
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if lines++; lines == killAt {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (run, seq, line) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, ev.Line)
		return err
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	if os.Getenv("APPLY") != "" {
		_, err = jetstream.ApplyStream(ctx, js, "EVENTS", in, h)
	} else {
		err = jetstream.FollowStream(ctx, js, "EVENTS", in, h)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 1
	}
	return 0
}

// TestCrashesOfTheStreamConsumerLoseNothingAndApplyNothingTwice kills a consumer process that follows
// a stream into its inbox, with SIGKILL at random moments (from outside, and from inside a handler in
// the middle of a transaction), while relays project three runs into the stream beside it and a fourth
// run is published around the sink with lines re-delivered; then checks that every run's effects are exactly the stream's distinct lines, in
// order, none twice, none skipped. Settings: one server, file storage, default sync interval;
// OUTBOX_CRASH_SEEDS sets how many kill plans run (one by default).
func TestCrashesOfTheStreamConsumerLoseNothingAndApplyNothingTwice(t *testing.T) {
	for seed := 1; seed <= crashSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { consumerCrashes(t, uint64(seed)) })
	}
}

// crashSeeds is how many kill plans a crash test runs: OUTBOX_CRASH_SEEDS, one by default.
func crashSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_CRASH_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

func consumerCrashes(t *testing.T, seed uint64) {
	const perRun = 150
	runs := []string{"run-a", "run-b", "run-c"}
	const rawRun = "run-raw"
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x73747265616d))
	ns := startServer(t)
	js := ns.connect(t)
	// One line at a time: the relays' atomic batches, three at once in this race-instrumented process
	// beside the server, outran its dispatch of their flow-control replies ("slow consumer").
	stream(t, js, time.Minute, oneAtATime)
	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := sink(t, js)
	relayCtx, stopRelays := context.WithCancel(ctx)
	var relays sync.WaitGroup
	for _, run := range runs {
		// rawRun is published beside the relays, around the book: the start's comparison of the book
		// with the stream would stop a relay whose first call comes after its first line.
		r := outboxtest.NewRelay(t, store, s, run, outbox.WithBatchSize(5), outbox.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
			outbox.WithBookCheck(false))
		relays.Add(1)
		go func() {
			defer relays.Done()
			if err := r.Run(relayCtx); err != nil && relayCtx.Err() == nil {
				t.Errorf("relay of %s: %v", run, err)
			}
		}()
	}
	defer func() { stopRelays(); relays.Wait() }()
	produced := make(chan error, 1)
	go func() {
		prng := rand.New(rand.NewPCG(seed, 1))
		for i := 1; i <= perRun; i++ {
			for _, run := range runs {
				if _, err := store.EnqueueEvent(ctx, run, journal.Builder(run, "unit", i)); err != nil {
					produced <- err
					return
				}
			}
			// A run published around the sink, with re-deliveries: the stream holds some of its lines
			// twice, as a relay of another kind, or a hand, may leave it.
			js.Publish(ctx, "outbox."+jetstream.Token(rawRun), jline(rawRun, int64(i), "x"))
			if prng.IntN(8) == 0 {
				again := max(1, i-prng.IntN(4))
				js.Publish(ctx, "outbox."+jetstream.Token(rawRun), jline(rawRun, int64(again), "x"))
			}
			time.Sleep(2 * time.Millisecond)
		}
		produced <- nil
	}()

	db := filepath.Join(t.TempDir(), "platform.db")
	env := []string{"DB=" + db, "NATS_URL=" + ns.url()}
	// Starts go on until the producers are done and either three killed starts had applied lines
	// (the machine's load decides how far a start gets before its drawn moment), or the consumer
	// holds every line the stream holds: a consumer faster than the producers catches up within a
	// start or two, and a start with nothing left to apply cannot show progress by applying. A
	// consumer that stops applying while the stream holds lines it has not applied meets neither.
	kills, progressed, applied := 0, 0, 0
	for done := false; ; {
		select {
		case err := <-produced:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		default:
		}
		if done && progressed >= 3 {
			break
		}
		// The stream is read after the effects were counted, the consumer dead between: equal
		// counts mean nothing was left to apply.
		if done && applied == len(streamLines(t, js)) {
			break
		}
		if kills == 300 {
			t.Fatalf("after 300 kills the consumer holds %d of the stream's %d lines; only %d starts applied anything",
				applied, len(streamLines(t, js)), progressed)
		}
		cenv := env
		if rng.IntN(2) == 0 {
			cenv = append(cenv, "KILL_LINES="+strconv.Itoa(1+rng.IntN(60)))
		}
		cmd := crashtest.Child(t, "stream-consumer", cenv...)
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var err error
		select {
		case err = <-exited:
		case <-time.After(time.Duration(50+rng.IntN(1000)) * time.Millisecond):
			cmd.Process.Signal(syscall.SIGKILL)
			err = <-exited
		}
		if !crashtest.Killed(err) {
			t.Fatalf("consumer start %d: %v, want it killed", kills+1, err)
		}
		kills++
		if n := countEffects(t, db); n > applied {
			applied, progressed = n, progressed+1
		}
	}
	for _, run := range runs {
		outboxtest.WaitProjected(t, store, run, perRun, time.Minute)
	}
	before := countEffects(t, db)
	if err := crashtest.Child(t, "stream-consumer", append(env, "APPLY=1")...).Run(); err != nil {
		t.Fatalf("the last, clean start: %v", err)
	}
	checkEffectsAreTheStreamsLines(t, js, db, append(runs, rawRun), perRun)
	t.Logf("seed %d: %d kills, %d of them after the start had applied lines; %d lines applied before the last, clean start",
		seed, kills, progressed, before)
	if before == 0 {
		t.Error("no consumer start applied anything before it was killed")
	}
}

// checkEffectsAreTheStreamsLines compares the consumer's effects with the stream's distinct lines:
// per run, seqs 1..n, each once, with the stream's bytes.
func checkEffectsAreTheStreamsLines(t *testing.T, js njs.JetStream, db string, runs []string, n int64) {
	t.Helper()
	streamLines := streamLines(t, js)
	in, err := inbox.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if q, _ := in.Quarantined(context.Background()); len(q) != 0 {
		t.Errorf("quarantines: %+v", q)
	}
	got := map[string]int{}
	err = in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		rows, err := tx.Query(`SELECT run, seq, line FROM effects`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var run string
			var seq int64
			var line []byte
			if err := rows.Scan(&run, &seq, &line); err != nil {
				return err
			}
			key := fmt.Sprintf("%s/%d", run, seq)
			got[key]++
			if streamLines[key] != string(line) {
				t.Errorf("%s applied with bytes the stream does not hold", key)
			}
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(streamLines) != len(runs)*int(n) {
		t.Errorf("the stream holds %d distinct lines, want %d", len(streamLines), len(runs)*int(n))
	}
	for key := range streamLines {
		if got[key] != 1 {
			t.Errorf("%s applied %d times", key, got[key])
		}
	}
	if len(got) != len(streamLines) {
		t.Errorf("%d lines applied, the stream holds %d", len(got), len(streamLines))
	}
}

// streamLines reads the stream EVENTS to its end: its distinct lines by "run/seq".
func streamLines(t *testing.T, js njs.JetStream) map[string]string {
	t.Helper()
	lines := map[string]string{}
	f, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.WriteLines(context.Background(), js, "EVENTS", f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, _ := os.ReadFile(f.Name())
	for _, l := range splitLines(data) {
		run, seq, err := journal.LineKey(l)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/%d", run, seq)
		if prev, ok := lines[key]; ok && prev != string(l) {
			t.Fatalf("the stream holds two versions of %s", key)
		}
		lines[key] = string(l)
	}
	return lines
}

func splitLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		i := 0
		for i < len(data) && data[i] != '\n' {
			i++
		}
		out = append(out, data[:i])
		data = data[min(i+1, len(data)):]
	}
	return out
}

// countEffects counts the consumer's effects, between two starts.
func countEffects(t *testing.T, db string) int {
	t.Helper()
	in, err := inbox.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	n := 0
	if err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		// A start killed before it made its table leaves none.
		if _, err := tx.Exec(`CREATE TABLE IF NOT EXISTS effects (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL)`); err != nil {
			return err
		}
		return tx.QueryRow(`SELECT count(*) FROM effects`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFollowingAClusterOfServerProcessesLosesNothingWhenTheStreamLeaderIsKilled runs three server processes with a
// three-replica stream, a relay projecting a run into it and FollowStream reading it into an inbox,
// kills the stream's leader with SIGKILL mid-way and restarts it later; every line is applied once.
// Settings: 3 replicas, file storage, default sync interval, the server's default election timeout.
func TestFollowingAClusterOfServerProcessesLosesNothingWhenTheStreamLeaderIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three server processes")
	}
	ctx := context.Background()
	nodes, routes, urls := planCluster(t)
	procs := map[string]*serverProcess{}
	for _, n := range nodes {
		p := &serverProcess{name: n.name, env: []string{"NAME=" + n.name,
			"PORT=" + strconv.Itoa(n.port), "CLUSTER_PORT=" + strconv.Itoa(n.clusterPort),
			"STORE_DIR=" + n.dir, "ROUTES=" + routes}}
		p.start(t)
		t.Cleanup(p.kill)
		procs[n.name] = p
	}
	js := connectAll(t, urls, njs.WithDefaultTimeout(time.Second))
	st := createR3(t, js)
	s := sinkWhenUp(t, js, jetstream.WithMinReplicas(3))
	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	relay := outboxtest.NewRelay(t, store, s, "run-1", outbox.WithBatchSize(20),
		outbox.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go relay.Run(runCtx)

	in := openInbox(t, filepath.Join(t.TempDir(), "platform.db"), inbox.WithPollInterval(100*time.Millisecond), inbox.WithBatchLines(16))
	f := follow(t, connectAll(t, urls, njs.WithDefaultTimeout(time.Second)), in, insertHandler)
	const n = 400
	var killed *serverProcess
	for i := 1; i <= n; i++ {
		if _, err := store.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "x", i)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		switch i {
		case n / 3:
			killed = procs[leaderOf(t, st)]
			killed.kill()
			t.Logf("killed the stream leader %s with SIGKILL at event %d", killed.name, i)
		case 2 * n / 3:
			killed.start(t)
		}
	}
	outboxtest.WaitProjected(t, store, "run-1", n, 90*time.Second)
	waitApplied(t, in, map[string][]int64{"run-1": seqs(1, n)})
	if err, ended := f.wait(0); ended {
		t.Fatalf("FollowStream ended: %v", err)
	}
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v", err)
	}
	if q, _ := in.Quarantined(ctx); len(q) != 0 {
		t.Errorf("quarantines %+v", q)
	}
}
