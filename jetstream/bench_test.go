// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/outbox"
)

// benchLines is how many lines each path publishes per iteration.
const benchLines = 5120

// BenchmarkSink measures, in each iteration and back to back on the same server and stream, the same
// number of 200-byte lines published through:
//
//   - async: PublishAsync with a Msg-Id (nats.go's default window of 4,000 unacknowledged messages),
//     waiting for every acknowledgement at the end: the broker's rate for one publisher that neither
//     orders nor checks anything (the baseline);
//   - atomic-256, atomic-1000: the sink's atomic path, Append in batches of 256 and of 1,000;
//   - each-256: the sink's one-at-a-time path, on a second stream without atomic publish;
//   - relay-default, relay-batch: a relay projecting a store through the sink with every default (it
//     takes the sink's BatchSize), and with outbox.WithBatchSize(sink.BatchSize()) said explicitly;
//   - relays-4: four relays with every default, each projecting a run of its own (a quarter of the
//     lines) through the one sink at the same time, as engines' relays sharing a stream do.
//
// Each path's rate is reported in lines/s and as a ratio of async's in the same iterations. R1 is one
// server with a one-replica file stream; R3 a three-server cluster with a three-replica stream (skipped
// with -short). All on loopback.
func BenchmarkSink(b *testing.B) {
	b.Run("R1", func(b *testing.B) {
		ns := startServer(b)
		benchSink(b, ns.connect(b), 1)
	})
	b.Run("R3", func(b *testing.B) {
		if testing.Short() {
			b.Skip("a three-server cluster")
		}
		_, js := startCluster(b)
		createR3(b, js)
		benchSink(b, js, 3)
	})
}

func benchSink(b *testing.B, js njs.JetStream, replicas int) {
	ctx := context.Background()
	if replicas == 1 {
		if _, err := jetstream.CreateStream(ctx, js, "EVENTS"); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "EACH", Subjects: []string{"each.>"},
		Storage: njs.FileStorage, Replicas: replicas, Duplicates: jetstream.DefaultDuplicateWindow}); err != nil {
		b.Fatal(err)
	}
	s := sink(b, js)
	each, err := jetstream.NewSink(js, "EACH", jetstream.WithSubjectPrefix("each"))
	if err != nil {
		b.Fatal(err)
	}
	store, err := outbox.Open(ctx, filepath.Join(b.TempDir(), "book.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()

	pad := strings.Repeat(" ", 120)
	mk := func(run string) []outbox.EventLine {
		out := make([]outbox.EventLine, benchLines)
		for i := range out {
			seq := int64(i + 1)
			out[i] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"spend","pad":"%s"}`, run, seq, pad)}
		}
		return out
	}
	appendIn := func(sk *jetstream.Sink, run string, batch int) func() {
		lines := mk(run)
		return func() {
			for i := 0; i < len(lines); i += batch {
				if err := sk.Append(ctx, run, lines[i:min(len(lines), i+batch)]); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	relayWith := func(run string, opts ...outbox.RelayOption) func() {
		builds := make([]outbox.EventBuilder, benchLines)
		for i := range builds {
			builds[i] = func(seq int64) ([]byte, error) {
				return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"spend","pad":"%s"}`, run, seq, pad), nil
			}
		}
		if _, err := store.EnqueueEvents(ctx, run, builds); err != nil {
			b.Fatal(err)
		}
		// The other cases append to the same stream around the book, so the book does not know their
		// runs: the start's comparison of the book with the stream would stop the relay.
		relay := outboxtest.NewRelay(b, store, s, run, append([]outbox.RelayOption{outbox.WithBookCheck(false)}, opts...)...)
		return func() {
			if err := relay.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	relays := func(run string, n int) func() {
		per := benchLines / n
		flush := make([]func(), n)
		for r := range flush {
			sub := fmt.Sprintf("%s-%d", run, r)
			builds := make([]outbox.EventBuilder, per)
			for i := range builds {
				builds[i] = func(seq int64) ([]byte, error) {
					return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"spend","pad":"%s"}`, sub, seq, pad), nil
				}
			}
			if _, err := store.EnqueueEvents(ctx, sub, builds); err != nil {
				b.Fatal(err)
			}
			relay := outboxtest.NewRelay(b, store, s, sub, outbox.WithBookCheck(false))
			flush[r] = func() {
				if err := relay.Flush(ctx); err != nil {
					b.Error(err)
				}
			}
		}
		return func() {
			var wg sync.WaitGroup
			for _, f := range flush {
				wg.Go(f)
			}
			wg.Wait()
		}
	}
	async := func(run string) func() {
		lines := mk(run)
		subject := s.Subject(run)
		return func() {
			for _, l := range lines {
				msg := nats.NewMsg(subject)
				msg.Data = l.Line
				if _, err := js.PublishMsgAsync(msg, njs.WithMsgID(jetstream.MsgID(run, l.Seq)), njs.WithStallWait(time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("PublishAsync: acknowledgements missing after a minute")
			}
		}
	}

	paths := []string{"async", "atomic-256", "atomic-1000", "each-256", "relay-default", "relay-batch", "relays-4"}
	took := make(map[string]time.Duration, len(paths))
	iter := 0
	for b.Loop() {
		iter++
		run := func(p string) string { return fmt.Sprintf("%s-%d", p, iter) }
		// Everything a path needs is made before any of them is timed.
		fns := map[string]func(){
			"async":         async(run("async")),
			"atomic-256":    appendIn(s, run("a256"), 256),
			"atomic-1000":   appendIn(s, run("a1000"), 1000),
			"each-256":      appendIn(each, run("each"), 256),
			"relay-default": relayWith(run("relay")),
			"relay-batch":   relayWith(run("relayb"), outbox.WithBatchSize(s.BatchSize())),
			"relays-4":      relays(run("relays"), 4),
		}
		for _, p := range paths {
			start := time.Now()
			fns[p]()
			took[p] += time.Since(start)
		}
	}
	for _, p := range paths {
		b.ReportMetric(float64(benchLines*iter)/took[p].Seconds(), p+"-lines/s")
		if p != "async" {
			b.ReportMetric(took["async"].Seconds()/took[p].Seconds(), p+"/async")
		}
	}
}
