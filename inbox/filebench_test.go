// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// BenchmarkApplyFile applies a journal of 1,000,000 lines of 200 bytes (20,000 with -short) into a
// fresh inbox, its handler inserting one row per line, at the default durability (FULL) and batch
// bounds, and reports lines per second and the heap: the peak above the start, and the peak live.
func BenchmarkApplyFile(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 20_000
	}
	path := longJournal(b, n, 200)
	var peak, live uint64
	var elapsed time.Duration
	for b.Loop() {
		start := time.Now()
		p, l, rep := applyFilePeakHeap(b, path, record)
		elapsed += time.Since(start)
		if rep.Applied != n {
			b.Fatalf("applied %d of %d", rep.Applied, n)
		}
		peak, live = max(peak, p), max(live, l)
	}
	b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "lines/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(live)/(1<<20), "peak-live-MiB")
}

// timedSink is a journal.File that notes when each Append returned, by the batch's last seq.
type timedSink struct {
	j  *journal.File
	mu sync.Mutex
	at map[int64]time.Time
}

func (s *timedSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	err := s.j.Append(ctx, runID, lines)
	if err == nil {
		now := time.Now()
		s.mu.Lock()
		for _, l := range lines {
			s.at[l.Seq] = now
		}
		s.mu.Unlock()
	}
	return err
}

// BenchmarkFollowFileLatency measures, for one event at a time, the time from File.Append returning
// (the relay projecting it, running beside) to FollowFile's commit of it, with file notifications and
// with polling alone (every 100 ms), and reports p50, p99 and the worst.
func BenchmarkFollowFileLatency(b *testing.B) {
	for _, notify := range []bool{true, false} {
		name := "notify"
		if !notify {
			name = "poll-100ms"
		}
		b.Run(name, func(b *testing.B) {
			followNotify = notify
			defer func() { followNotify = true }()
			rj := newRelayJournal(b, journalPath(b))
			sink := &timedSink{j: rj.j, at: map[int64]time.Time{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			relay := outboxtest.NewRelay(b, rj.s, sink, "a")
			relayDone := make(chan error, 1)
			go func() { relayDone <- relay.Run(ctx) }()

			c := newConsumer(b, WithPollInterval(100*time.Millisecond))
			type commit struct {
				seq int64
				at  time.Time
			}
			committed := make(chan commit, 1)
			var last int64
			afterFileCommit = func(string, FilePosition) {
				at := time.Now()
				p, _ := c.in.Position(context.Background(), "a")
				if p > last {
					last = p
					committed <- commit{p, at}
				}
			}
			defer func() { afterFileCommit = nil }()
			followDone := make(chan error, 1)
			go func() { followDone <- c.in.FollowFile(ctx, rj.path, record) }()

			var lat []time.Duration
			early := 0
			for b.Loop() {
				seq, err := rj.s.EnqueueEvent(ctx, "a", journal.Builder("a", "unit", nil))
				if err != nil {
					b.Fatal(err)
				}
				var done time.Time
				for cm := range committed {
					if cm.seq >= seq {
						done = cm.at
						break
					}
				}
				// The follower can read a line before the writer's fdatasync returns: it is in the
				// page cache. Such a line counts as no latency at all.
				var at time.Time
				for {
					sink.mu.Lock()
					a, ok := sink.at[seq]
					sink.mu.Unlock()
					if ok {
						at = a
						break
					}
					time.Sleep(10 * time.Microsecond)
				}
				d := done.Sub(at)
				if d < 0 {
					early++
					d = 0
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			cancel()
			if err := <-followDone; !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
			<-relayDone
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(q(0.50), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
			b.ReportMetric(float64(early)/float64(len(lat)), "before-sync-fraction")
		})
	}
}

// BenchmarkPrefixProof is what a file source pays once per start when it resumes inside a file: the
// SHA-256 of everything before its position, read from the file (64 MiB here, in the page cache).
func BenchmarkPrefixProof(b *testing.B) {
	const size = 64 << 20
	path := journalPath(b)
	line := []byte(`{"engine_run_id":"r","seq":1,"type":"unit","data":{"cents":100}}` + "\n")
	content := bytes.Repeat(line, size/len(line))
	if err := os.WriteFile(path, content, 0o644); err != nil {
		b.Fatal(err)
	}
	p := FilePosition{Offset: int64(len(content)), Prefix: sha256.Sum256(content)}
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		jf, err := openJournalFile(path)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := jf.provesPrefix(p); !ok || err != nil {
			b.Fatalf("not proven: %v", err)
		}
		jf.close()
	}
}
