// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/jetstream"
)

// streamMemory applies the stream EVENTS into a fresh inbox with small batch bounds, sampling the heap
// every millisecond, and prints the peak of the heap's objects and how many lines it applied.
func streamMemory() int {
	ctx := context.Background()
	stop := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var p uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			p = max(p, sample[0].Value.Uint64())
			select {
			case <-stop:
				peak <- p
				return
			case <-tick.C:
			}
		}
	}()
	in, err := inbox.Open(ctx, os.Getenv("DB"), inbox.WithMaxLineSize(128<<10), inbox.WithBatchBytes(256<<10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer in.Close()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, func(context.Context, *sql.Tx, inbox.Event) error { return nil })
	close(stop)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %d\n", <-peak, rep.Applied)
	return 0
}

// TestApplyStreamHoldsABoundedHeapWhateverTheBacklog applies a backlog of 82 MB (800 lines of
// 100 KiB) in a consumer process with batches of at most 256 KiB, and checks that the consumer's heap
// never held more than a small part of it: the consumer's buffer and the batch follow the inbox's
// bounds, not the stream's length. Settings: one server (the parent), a one-replica file stream.
func TestApplyStreamHoldsABoundedHeapWhateverTheBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("82 MB through a server")
	}
	const n, size = 800, 100 << 10
	ns := startServer(t)
	js := ns.connect(t)
	stream(t, js, time.Minute, atomicBatches)
	pad := strings.Repeat("x", size)
	for seq := 1; seq <= n; seq++ {
		if _, err := js.PublishAsync("outbox.a", fmt.Appendf(nil, `{"engine_run_id":"a","seq":%d,"type":"big","pad":%q}`, seq, pad)); err != nil {
			t.Fatal(err)
		}
		if seq%200 == 0 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	cmd := crashtest.Child(t, "stream-memory", "DB="+filepath.Join(t.TempDir(), "platform.db"), "NATS_URL="+ns.url())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var peak, applied uint64
	if _, err := fmt.Sscan(string(out), &peak, &applied); err != nil {
		t.Fatalf("consumer's output %q: %v", out, err)
	}
	if applied != n {
		t.Fatalf("applied %d of %d", applied, n)
	}
	const bound = 24 << 20 // measured: under 5 MiB; the backlog is 82 MB
	t.Logf("peak heap %s MiB applying %d MB", strconv.FormatFloat(float64(peak)/(1<<20), 'f', 1, 64), n*size/1_000_000)
	if peak > bound {
		t.Errorf("the consumer's heap peaked at %d bytes, over %d, applying a backlog of %d bytes", peak, bound, n*size)
	}
}
