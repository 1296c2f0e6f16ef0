// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestAClusterTrimmedBesideARelayAndTwoReadersLosesNothingAndACappedReaderStopsWithAGap runs three
// in-process servers with a three-replica stream, a relay projecting a book into it, Trim in a loop,
// and two readers, the second stopped for a while; the stream's leader is shut down once. Both readers
// end with every line the book projected. Then the second is held while more lines come, the cap
// removes them past it, and it stops with a retention gap.
func TestAClusterTrimmedBesideARelayAndTwoReadersLosesNothingAndACappedReaderStopsWithAGap(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	ctx := context.Background()
	servers, js := startCluster(t)
	stream := createR3(t, js)
	s := sinkWhenUp(t, js, jetstream.WithMinReplicas(3))
	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	relay := outboxtest.NewRelay(t, store, s, "run-1", outbox.WithBatchSize(8), outbox.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(runCtx) }()

	poll := inbox.WithPollInterval(20 * time.Millisecond)
	one := openInbox(t, filepath.Join(t.TempDir(), "one.db"), inbox.WithReaderName("one"), poll)
	two := openInbox(t, filepath.Join(t.TempDir(), "two.db"), inbox.WithReaderName("two"), poll)
	follow(t, js, one, insertHandler)
	f2 := follow(t, js, two, insertHandler)
	waitRegistered(t, js, "one")
	waitRegistered(t, js, "two")

	trimCtx, stopTrim := context.WithCancel(ctx)
	trimDone := make(chan struct{})
	go func() {
		defer close(trimDone)
		for trimCtx.Err() == nil {
			// Errors during the leader's failover are met by the next pass, as outbox stream
			// trim --every does.
			_, _ = jetstream.Trim(trimCtx, js, "EVENTS", jetstream.WithKeep(0))
			time.Sleep(20 * time.Millisecond)
		}
	}()

	const n = 300
	for i := 1; i <= n; i++ {
		if _, err := store.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "x", i)); err != nil {
			t.Fatal(err)
		}
		switch i {
		case n / 4:
			f2.stop()
		case n / 3:
			leader := leaderOf(t, stream)
			servers[leader].Shutdown()
			t.Logf("shut down the stream leader %s at event %d", leader, i)
		case n / 2:
			f2 = follow(t, js, two, insertHandler)
		}
	}
	outboxtest.WaitProjected(t, store, "run-1", n, 2*time.Minute)
	want := map[string][]int64{"run-1": seqs(1, n)}
	waitApplied(t, one, want)
	waitApplied(t, two, want)
	stopTrim()
	<-trimDone
	// Both readers applied everything: one more pass leaves the stream empty of lines.
	if _, err := jetstream.Trim(ctx, js, "EVENTS", jetstream.WithKeep(0)); err != nil {
		t.Fatal(err)
	}
	if st := streamState(t, js); st.Msgs != 0 || st.LastSeq < n {
		t.Errorf("stream after trimming what both applied: %+v", st)
	}

	// The second reader is held while more lines come; the cap takes them.
	f2.stop()
	for i := n + 1; i <= n+100; i++ {
		if _, err := store.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	outboxtest.WaitProjected(t, store, "run-1", n+100, 2*time.Minute)
	waitApplied(t, one, map[string][]int64{"run-1": seqs(1, n+100)})
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep, err := jetstream.Trim(tctx, js, "EVENTS", jetstream.WithKeep(0), jetstream.WithMaxBytes(1))
	if err != nil {
		t.Fatalf("Trim with the cap: %v", err)
	}
	if len(rep.LeftBehind) != 1 || rep.LeftBehind[0].Name != "two" {
		t.Fatalf("left behind %+v, want reader two", rep.LeftBehind)
	}
	_, err = jetstream.ApplyStream(tctx, js, "EVENTS", two, insertHandler)
	if !errors.Is(err, jetstream.ErrRetentionGap) {
		t.Fatalf("the held reader: %v, want a retention gap", err)
	}
	stop()
	<-relayDone
}
