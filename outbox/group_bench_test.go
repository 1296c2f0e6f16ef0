// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// latencies collects call latencies from many goroutines and reports percentiles.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(ds []time.Duration) { l.mu.Lock(); l.all = append(l.all, ds...); l.mu.Unlock() }

// quantile returns the latency at p (0 to 1) of those collected, once report has sorted them.
func (l *latencies) quantile(p float64) time.Duration {
	if len(l.all) == 0 {
		return 0
	}
	return l.all[int(p*float64(len(l.all)-1))]
}

func (l *latencies) report(b *testing.B) {
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	q := func(p float64) float64 { return float64(l.all[int(p*float64(len(l.all)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(l.all[len(l.all)-1].Microseconds()), "max-µs")
}

// produce runs b.N EnqueueEvent calls spread over p goroutines, all on one run (an engine's wave of
// units shares its run id), and reports events/s and latency percentiles.
func produce(b *testing.B, s *outbox.Store, p int) {
	ctx := context.Background()
	var next atomic.Int64
	var lat latencies
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < p; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			const run = "run"
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := s.EnqueueEvent(ctx, run, benchBuild); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat.add(mine)
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	lat.report(b)
}

// BenchmarkProducers: concurrent EnqueueEvent callers at FULL, with group commit (the default) and
// without. Every call is durable when it returns.
func BenchmarkProducers(b *testing.B) {
	for _, group := range []bool{true, false} {
		for _, p := range []int{1, 4, 16, 64} {
			b.Run(fmt.Sprintf("group=%v/producers=%d", group, p), func(b *testing.B) {
				s := openBench(b, filepath.Join(b.TempDir(), "p.db"), outbox.WithGroupCommit(group))
				produce(b, s, p)
			})
		}
	}
}

// BenchmarkProducersRatio measures the group-commit target directly: each iteration runs 2,000 calls
// from one producer and then 8,000 calls from 16 producers, on one store, and the ratio is the rate of
// the second over the first, summed over the iterations. Measured back to back, the two see the same
// disk: its speed drifts by a third within minutes here, which in separate benchmarks moves the ratio
// of their medians by more than a producer's worth.
func BenchmarkProducersRatio(b *testing.B) {
	lone, many := 2000, 8000
	if testing.Short() {
		lone, many = 50, 200
	}
	s := openBench(b, filepath.Join(b.TempDir(), "p.db"))
	ctx := context.Background()
	run := func(producers, calls int) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(calls) {
					if _, err := s.EnqueueEvent(ctx, "run", benchBuild); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	var inLone, inMany time.Duration
	for b.Loop() {
		inLone += run(1, lone)
		inMany += run(16, many)
	}
	loneRate := float64(lone*b.N) / inLone.Seconds()
	manyRate := float64(many*b.N) / inMany.Seconds()
	b.ReportMetric(loneRate, "1-producer-events/s")
	b.ReportMetric(manyRate, "16-producer-events/s")
	b.ReportMetric(manyRate/loneRate, "ratio")
}

// BenchmarkDurabilityRatio measures what durability costs 16 producers: each iteration runs 8,000
// calls from 16 producers on a store at DurabilityFull and then 8,000 on one at DurabilityNormal, and
// the ratio is the first rate over the second, summed over the iterations. Alternated back to back, as
// in BenchmarkProducersRatio, the two settings see the same disk and the same neighbours.
func BenchmarkDurabilityRatio(b *testing.B) {
	calls := 8000
	if testing.Short() {
		calls = 200
	}
	dir := b.TempDir()
	full := openBench(b, filepath.Join(dir, "full.db"))
	normal := openBench(b, filepath.Join(dir, "normal.db"), outbox.WithDurability(outbox.DurabilityNormal))
	var inFull, inNormal time.Duration
	for b.Loop() {
		inFull += produceN(b, full, 16, calls)
		inNormal += produceN(b, normal, 16, calls)
	}
	fullRate := float64(calls*b.N) / inFull.Seconds()
	normalRate := float64(calls*b.N) / inNormal.Seconds()
	b.ReportMetric(fullRate, "full-events/s")
	b.ReportMetric(normalRate, "normal-events/s")
	b.ReportMetric(fullRate/normalRate, "ratio")
}

// produceN runs calls EnqueueEvent calls on one run from producers goroutines and returns how long
// they took.
func produceN(b *testing.B, s *outbox.Store, producers, calls int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(calls) {
				if _, err := s.EnqueueEvent(context.Background(), "run", benchBuild); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

// BenchmarkFdatasync is the disk's limit: a 4 KiB overwrite followed by fdatasync, one after another.
func BenchmarkFdatasync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "sync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for b.Loop() {
		if _, err := f.WriteAt(page, 0); err != nil {
			b.Fatal(err)
		}
		if err := fdatasync(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "syncs/s")
}

// BenchmarkEnqueueEvents: 100 events in one call, beside the same statements in a hand-written
// database/sql loop (one transaction, the insert prepared once).
func BenchmarkEnqueueEvents(b *testing.B) {
	ctx := context.Background()
	const n = 100
	builds := make([]outbox.EventBuilder, n)
	for i := range builds {
		builds[i] = benchBuild
	}
	b.Run("baseline", func(b *testing.B) {
		d := baselineDB(b, filepath.Join(b.TempDir(), "b.db"), "FULL")
		insert, err := d.PrepareContext(ctx, db.EventInsert)
		if err != nil {
			b.Fatal(err)
		}
		defer insert.Close()
		for b.Loop() {
			tx, err := d.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			var next int64
			if err := tx.QueryRowContext(ctx, db.EventLastSeq, "run").Scan(&next); err != nil {
				b.Fatal(err)
			}
			next++
			st := tx.StmtContext(ctx, insert)
			now := time.Now().UnixMilli()
			for i := 0; i < n; i++ {
				line, _ := benchBuild(next)
				if _, err := st.ExecContext(ctx, "run", next, line, "", now, 0); err != nil {
					b.Fatal(err)
				}
				next++
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("outbox", func(b *testing.B) {
		s := openBench(b, filepath.Join(b.TempDir(), "o.db"))
		for b.Loop() {
			if _, err := s.EnqueueEvents(ctx, "run", builds); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkGrowthLatency: 16 producers at FULL into a table that already holds 10k to 1M rows (10M
// with OUTBOX_BENCH_10M=1, a prefill of a few minutes), reporting throughput, p99 and the worst
// stall; SQLite's automatic WAL checkpoints run inside producers' commits.
func BenchmarkGrowthLatency(b *testing.B) {
	sizes := []int{10_000, 100_000, 1_000_000}
	if os.Getenv("OUTBOX_BENCH_10M") != "" {
		sizes = append(sizes, 10_000_000)
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("rows=%d", size), func(b *testing.B) {
			produce(b, prefilledStore(b, size), 16)
		})
	}
}

// BenchmarkGrowthLatencyWithRelay is BenchmarkGrowthLatency with a relay projecting the producers'
// lines into a journal file as they commit, as in an engine.
func BenchmarkGrowthLatencyWithRelay(b *testing.B) {
	for _, size := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", size), func(b *testing.B) {
			s := prefilledStore(b, size)
			sink := &fileSink{path: filepath.Join(b.TempDir(), "j")}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			relay := outboxtest.NewRelay(b, s, sink, "run")
			go func() { done <- relay.Run(ctx) }()
			produce(b, s, 16)
			cancel()
			<-done
		})
	}
}

// fileSink appends and fdatasyncs, like journal.File, without importing it (journal imports outbox).
type fileSink struct {
	path string
	f    *os.File
}

func (s *fileSink) Append(_ context.Context, _ string, lines []outbox.EventLine) error {
	if s.f == nil {
		f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.f = f
	}
	var buf []byte
	for _, l := range lines {
		buf = append(append(buf, l.Line...), '\n')
	}
	if _, err := s.f.Write(buf); err != nil {
		return err
	}
	return fdatasync(s.f)
}
