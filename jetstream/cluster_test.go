// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// freePorts reserves n loopback ports: a cluster's servers must know each other's route ports
// before any of them starts, since the expected number of peers comes from the route list.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// node is one server of a test cluster: its name, client and route ports, and store directory.
type node struct {
	name              string
	port, clusterPort int
	dir               string
}

func (n node) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// options are the server options of n in a cluster whose route list is routes. File storage, the
// default sync interval.
func (n node) options(routes string) *server.Options {
	return &server.Options{
		ServerName: n.name, Host: "127.0.0.1", Port: n.port, JetStream: true,
		StoreDir: n.dir, NoLog: true, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "outbox", Host: "127.0.0.1", Port: n.clusterPort},
		Routes:  server.RoutesFromStr(routes),
	}
}

// planCluster picks three nodes on free loopback ports, each with a store directory of its own, and
// the route list all of them are given.
func planCluster(t testing.TB) (nodes []node, routes string, urls []string) {
	ports := freePorts(t, 6) // client and route port of each server
	var rs []string
	for i := 0; i < 3; i++ {
		nodes = append(nodes, node{name: fmt.Sprintf("n%d", i), port: ports[i], clusterPort: ports[3+i],
			dir: filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i))})
		rs = append(rs, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, nodes[i].url())
	}
	return nodes, strings.Join(rs, ","), urls
}

// startCluster starts three in-process servers in one cluster and returns them by name and a
// JetStream context on a connection to all three.
func startCluster(t testing.TB) (map[string]*server.Server, njs.JetStream) {
	t.Helper()
	nodes, routes, urls := planCluster(t)
	servers := map[string]*server.Server{}
	for _, n := range nodes {
		srv, err := server.NewServer(n.options(routes))
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		t.Cleanup(srv.Shutdown)
		servers[n.name] = srv
	}
	return servers, connectAll(t, urls)
}

// connectAll returns a JetStream context on a connection to any of urls that reconnects for as long
// as the test runs.
func connectAll(t testing.TB, urls []string, opts ...njs.JetStreamOpt) njs.JetStream {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true)) // server processes may not listen yet
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := njs.New(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// createR3 creates the stream EVENTS with three replicas through CreateStream, once the cluster has
// elected its meta leader (until then stream creation fails).
func createR3(t testing.TB, js njs.JetStream) njs.Stream {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		// A deadline of its own: js may have a short default timeout meant for the test's appends.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithReplicas(3))
		cancel()
		if err == nil {
			return stream
		}
		if time.Now().After(deadline) {
			t.Fatalf("create the stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sinkWhenUp is sink for a js whose default timeout is short (meant for the appends under test):
// NewSink reads the stream's settings under that timeout, which a loaded cluster may not meet, so it
// is tried again for up to 30 s.
func sinkWhenUp(t testing.TB, js njs.JetStream, opts ...jetstream.Option) *jetstream.Sink {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		s, err := jetstream.NewSink(js, "EVENTS", opts...)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("NewSink: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaderOf names the stream's leader, asked with a deadline of its own: js's default timeout may be
// short, meant for the appends under test.
func leaderOf(t testing.TB, stream njs.Stream) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.Cluster.Leader
}

// TestAClusterLosesNothingWhenTheStreamLeaderDies runs three in-process servers with a three-replica
// file-storage stream, projects a store into it, and shuts the stream's leader down mid-projection.
// Settings: 3 replicas, file storage, default sync interval: an acknowledged line is on a majority.
func TestAClusterLosesNothingWhenTheStreamLeaderDies(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	ctx := context.Background()
	servers, js := startCluster(t)
	stream := createR3(t, js)
	s := sink(t, js, jetstream.WithMinReplicas(3))

	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	relay := outboxtest.NewRelay(t, store, s, "run-1", outbox.WithBatchSize(8), outbox.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	const n = 300
	for i := 0; i < n; i++ {
		if _, err := store.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "x", i)); err != nil {
			t.Fatal(err)
		}
		if i == n/3 {
			info, err := stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			leader := info.Cluster.Leader
			servers[leader].Shutdown()
			t.Logf("shut down the stream leader %s at event %d", leader, i)
		}
	}
	outboxtest.WaitProjected(t, store, "run-1", n, 60*time.Second)
	stop()
	<-done
	if rep := verify(t, js); rep.Runs["run-1"].Last != n || rep.Lines != n || rep.Duplicates != 0 {
		t.Errorf("stream after losing its leader: %+v", rep)
	}
}
