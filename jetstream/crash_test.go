// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/outbox"
)

// TestMain lets the crash tests re-execute this binary as an engine that projects to a NATS server
// the parent runs, or as one of the servers of a cluster.
func TestMain(m *testing.M) {
	crashtest.Main(m, map[string]func() int{"nats-engine": natsEngine, "nats-server": natsServerChild,
		"stream-consumer": streamConsumer, "stream-memory": streamMemory,
		"stream-trimmer": streamTrimmer, "stream-reader": streamReader})
}

// natsEngine is one start of the demo engine with a JetStream sink; when told (crashtest.KillAt), it
// kills itself with SIGKILL at a fault point.
func natsEngine() int {
	crashtest.ArmFromEnv()
	units, _ := strconv.Atoi(os.Getenv("UNITS"))
	err := demo.RunEngine(context.Background(), demo.EngineConfig{
		DB: os.Getenv("DB"), Units: units, RunID: os.Getenv("RUN"), Committed: os.Getenv("COMMITTED"), BatchSize: 4,
		OpenSink: func(ctx context.Context) (outbox.Sink, func() error, error) {
			nc, err := nats.Connect(os.Getenv("NATS_URL"))
			if err != nil {
				return nil, nil, err
			}
			js, err := njs.New(nc)
			if err != nil {
				nc.Close()
				return nil, nil, err
			}
			s, err := jetstream.NewSink(js, "EVENTS")
			if err != nil {
				nc.Close()
				return nil, nil, err
			}
			return s, func() error { nc.Close(); return nil }, nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	return 0
}

// TestCrashesProjectingToJetStreamLoseNothingAndStoreNothingTwice kills real engine processes that
// project to a JetStream stream, at each point of the write path, the relay and recovery, restarts
// them, and checks the stream against the database. The stream's duplicate window is 100 ms, so
// re-deliveries after a restart are recognised by the sink, not by the broker's Msg-Id: the stream
// must hold every line exactly once. Settings: one server, file storage, default sync interval.
func TestCrashesProjectingToJetStreamLoseNothingAndStoreNothingTwice(t *testing.T) {
	const units = 40
	ns := startServer(t)
	js := ns.connect(t)
	stream(t, js, 100*time.Millisecond, atomicBatches)
	dir := t.TempDir()
	db, committed := filepath.Join(dir, "book.db"), filepath.Join(dir, "committed")
	rng := rand.New(rand.NewPCG(7, 7))
	plan := []struct {
		point string
		at    int
	}{
		{faultpoint.RelayAfterAppend, 1 + rng.IntN(units/4)},
		{faultpoint.BeforeCommit, 1 + rng.IntN(units)},
		{faultpoint.RecoverBeforeForget, 1},
		{faultpoint.AfterCommit, 1 + rng.IntN(units)},
		{faultpoint.RecoverAfterForget, 1},
		{faultpoint.RelayAfterAppend, 1 + rng.IntN(units/4)},
		{"", 0},
	}
	kills := 0
	for i, st := range plan {
		env := []string{"NATS_URL=" + ns.url(), "DB=" + db, "COMMITTED=" + committed,
			"UNITS=" + strconv.Itoa(units), fmt.Sprintf("RUN=run-%d", i)}
		if st.point != "" {
			env = append(env, crashtest.KillAt(st.point, st.at)...)
		}
		err := crashtest.Child(t, "nats-engine", env...).Run()
		switch {
		case err == nil:
		case crashtest.Killed(err):
			kills++
		default:
			t.Fatalf("start %d (%s #%d): %v", i, st.point, st.at, err)
		}
		time.Sleep(150 * time.Millisecond) // past the duplicate window
	}
	lines := filepath.Join(dir, "stream.jsonl")
	f, err := os.Create(lines)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.WriteLines(context.Background(), js, "EVENTS", f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, err := demo.Check(context.Background(), db, lines, units, committed)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Errorf("after %d kills: %v", kills, res.Problems())
	}
	if res.Report.Duplicates != 0 {
		t.Errorf("the stream holds %d lines twice", res.Report.Duplicates)
	}
	if kills < 4 {
		t.Errorf("only %d of the planned kills happened", kills)
	}
	t.Logf("%d kills, %d lines, %d runs, %d committed events checked", kills, res.Report.Lines, len(res.Report.Runs), res.CommittedChecked)
}
