// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// natsServerChild runs this binary as one nats-server of a cluster, configured by the environment,
// until it is killed.
func natsServerChild() int {
	port, _ := strconv.Atoi(os.Getenv("PORT"))
	clusterPort, _ := strconv.Atoi(os.Getenv("CLUSTER_PORT"))
	n := node{name: os.Getenv("NAME"), port: port, clusterPort: clusterPort, dir: os.Getenv("STORE_DIR")}
	srv, err := server.NewServer(n.options(os.Getenv("ROUTES")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	srv.Start()
	srv.WaitForShutdown()
	return 0
}

// serverProcess is one nats-server child process with its own store directory, which outlives it.
type serverProcess struct {
	name string
	env  []string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *serverProcess) start(t *testing.T) {
	t.Helper()
	p.cmd = crashtest.Child(t, "nats-server", p.env...)
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(p.cmd, p.done)
}

func (p *serverProcess) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestAClusterOfServerProcessesLosesNothingWhenTheLeaderIsKilled runs three nats-server processes with
// a three-replica stream, kills the stream's leader with SIGKILL while a relay projects a store into
// it, restarts the killed server from its store directory, and checks that the stream holds every line
// once, in order, and that the relay was never refused. It logs the failover time: from the kill to a
// new stream leader, and to the first batch acknowledged after it. Settings: 3 replicas, file storage,
// default sync interval, the server's default raft election timeout (4-9 s).
func TestAClusterOfServerProcessesLosesNothingWhenTheLeaderIsKilled(t *testing.T) {
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
	// Requests wait for an answer 1s instead of the default 5s: a publication in flight when the
	// leader dies is never answered, and the time it waits is added to the failover.
	js := connectAll(t, urls, njs.WithDefaultTimeout(time.Second))
	stream := createR3(t, js)
	s := sinkWhenUp(t, js, jetstream.WithMinReplicas(3))

	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var mu sync.Mutex
	var killedAt, resumedAt time.Time
	relay := outboxtest.NewRelay(t, store, s, "run-1", outbox.WithBatchSize(s.BatchSize()),
		outbox.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		outbox.WithOnProjected(func(string, int, int64) {
			mu.Lock()
			if !killedAt.IsZero() && resumedAt.IsZero() {
				resumedAt = time.Now()
			}
			mu.Unlock()
		}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	const n = 600
	var killed *serverProcess
	elected := make(chan time.Duration, 1)
	for i := 1; i <= n; i++ {
		if _, err := store.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "x", i)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond) // a steady flow, so that the kill lands mid-projection
		}
		switch i {
		case n / 3:
			killed = procs[leaderOf(t, stream)]
			mu.Lock()
			killedAt = time.Now()
			mu.Unlock()
			killed.kill()
			t.Logf("killed the stream leader %s with SIGKILL at event %d", killed.name, i)
			go func(old string) {
				if at, ok := waitNewLeader(stream, old, 20*time.Second); ok {
					elected <- at.Sub(killedAt)
				} else {
					elected <- -1
				}
			}(killed.name)
		case 2 * n / 3:
			killed.start(t)
		}
	}
	outboxtest.WaitProjected(t, store, "run-1", n, 60*time.Second)
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("relay: %v", err)
	}
	mu.Lock()
	if took := <-elected; took >= 0 {
		t.Logf("failover: a new stream leader %v after the kill, the first batch acknowledged %v after it",
			took.Round(time.Millisecond), resumedAt.Sub(killedAt).Round(time.Millisecond))
	} else {
		// Loaded machines answer Info slowly; the old leader may be back before another is seen.
		t.Logf("failover: no other leader seen; the first batch acknowledged %v after the kill",
			resumedAt.Sub(killedAt).Round(time.Millisecond))
	}
	mu.Unlock()
	waitReplicasCurrent(t, stream)
	// Read back with the client's ordinary request timeout: the relay's second, chosen for a quick
	// failover, can pass while a cluster that has just caught a server up answers slowly.
	reader := connectAll(t, urls)
	var rep journal.Report
	for attempt := 1; ; attempt++ {
		var err error
		if rep, err = jetstream.Verify(ctx, reader, "EVENTS"); err == nil {
			break
		} else if attempt == 5 {
			t.Fatalf("Verify: %v", err)
		}
		time.Sleep(time.Second)
	}
	if rep.Runs["run-1"].Last != n || rep.Lines != n || rep.Duplicates != 0 {
		t.Errorf("stream after its leader was killed and restarted: %+v", rep)
	}
}

// waitNewLeader returns when the stream has a leader other than old, or false after d.
func waitNewLeader(stream njs.Stream, old string, d time.Duration) (time.Time, bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := stream.Info(ctx)
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != old {
			return time.Now(), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, false
}

// waitReplicasCurrent waits until every replica of the stream is online and has caught up with its
// leader.
func waitReplicasCurrent(t *testing.T, stream njs.Stream) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := stream.Info(context.Background())
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2 &&
			!slices.ContainsFunc(info.Cluster.Replicas, func(p *njs.PeerInfo) bool { return !p.Current || p.Offline || p.Lag > 0 }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas not current after 30s: %v %+v", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
