// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// largeBuild renders a line of n bytes.
func largeBuild(n int) outbox.EventBuilder {
	line := make([]byte, n)
	for i := range line {
		line[i] = 'x'
	}
	return func(int64) ([]byte, error) { return line, nil }
}

// BenchmarkMixedProducers measures the small lines' latency while one producer enqueues 16 MiB lines
// beside 15 producers of small lines, each sub-benchmark beside its baseline: the same 15 producers
// alone. A group ends once it holds 1 MiB of lines, and the small calls waiting when a large write
// ends go before the next large line, so the small ones wait for about one large write, not for a
// group of them nor for the next one; p50-large-writes and p99-large-writes are their latencies in
// units of one large call's.
func BenchmarkMixedProducers(b *testing.B) {
	large := 16 << 20
	if testing.Short() {
		large = 1 << 20
	}
	for _, mixed := range []bool{false, true} {
		name := "small-only"
		if mixed {
			name = fmt.Sprintf("beside-%dMiB", large>>20)
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s := openBench(b, filepath.Join(b.TempDir(), "b.db"))
			stop := make(chan struct{})
			var bigDone sync.WaitGroup
			var bigTotal time.Duration
			var bigCalls int
			var bigLat latencies
			if mixed {
				bigDone.Add(1)
				go func() {
					defer bigDone.Done()
					build := largeBuild(large)
					for {
						select {
						case <-stop:
							return
						default:
						}
						t0 := time.Now()
						if _, err := s.EnqueueEvent(ctx, "large", build); err != nil {
							b.Error(err)
							return
						}
						d := time.Since(t0)
						bigTotal += d
						bigCalls++
						bigLat.all = append(bigLat.all, d)
					}
				}()
			}
			var next atomic.Int64
			var lat latencies
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < 15; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if _, err := s.EnqueueEvent(ctx, "small", benchBuild); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					lat.add(mine)
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			bigDone.Wait()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "small-events/s")
			lat.report(b)
			if bigCalls > 0 {
				// What one large write costs its own caller: the unit of the small ones' delay.
				unit := bigTotal / time.Duration(bigCalls)
				b.ReportMetric(float64(unit.Microseconds()), "large-call-µs")
				b.ReportMetric(lat.quantile(0.50).Seconds()/unit.Seconds(), "p50-large-writes")
				b.ReportMetric(lat.quantile(0.99).Seconds()/unit.Seconds(), "p99-large-writes")
				// The large calls vary too: the slowest of them is what a small call waiting for
				// exactly one of them may wait.
				slices.Sort(bigLat.all)
				b.ReportMetric(float64(bigLat.quantile(0.99).Microseconds()), "large-p99-µs")
			}
		})
	}
}

// BenchmarkSmallAfterLargeLine measures small enqueues into a run whose last line is large, beside
// the baseline of a run whose lines are all small. The large line is stored apart from its row, so
// the run's next-seq lookup and the insert beside it do not read it.
func BenchmarkSmallAfterLargeLine(b *testing.B) {
	large := 32 << 20
	if testing.Short() {
		large = 1 << 20
	}
	for _, withLarge := range []bool{false, true} {
		name := "after-small"
		if withLarge {
			name = fmt.Sprintf("after-%dMiB", large>>20)
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s := openBench(b, filepath.Join(b.TempDir(), "b.db"), outbox.WithMaxLineSize(max(large, outbox.DefaultMaxLineSize)))
			if withLarge {
				if _, err := s.EnqueueEvent(ctx, "run", largeBuild(large)); err != nil {
					b.Fatal(err)
				}
			} else if _, err := s.EnqueueEvent(ctx, "run", benchBuild); err != nil {
				b.Fatal(err)
			}
			var lat latencies
			mine := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := s.EnqueueEvent(ctx, "run", benchBuild); err != nil {
					b.Fatal(err)
				}
				mine = append(mine, time.Since(t0))
			}
			lat.add(mine)
			lat.report(b)
		})
	}
}
