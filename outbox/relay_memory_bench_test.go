// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// BenchmarkRelayPeakMemory drains a backlog of lines of one size into a journal file and reports the
// highest heap sampled during the drain, above the heap before it (peak-MiB), beside the same drain
// with batches bounded by lines only (WithBatchBytes(math.MaxInt): 256 lines a batch and two read
// ahead, as before the byte bound). The peak includes the journal's copy of the batch it appends and
// the garbage the collector has not yet reclaimed.
func BenchmarkRelayPeakMemory(b *testing.B) {
	for _, c := range []struct {
		lines, size int
	}{{20_000, 200}, {512, 64 << 10}, {128, 1 << 20}, {32, 4 << 20}} {
		if testing.Short() {
			c.lines = max(c.lines/16, 4)
		}
		ctx := context.Background()
		s := openStore(b)
		enqueueSized(b, s, "run", repeatSize(c.lines, c.size))
		raw, err := driver.Open("file:" + s.Path())
		if err != nil {
			b.Fatal(err)
		}
		for _, cfg := range []struct {
			name  string
			bytes int
		}{{"lines-only", math.MaxInt}, {"default", outbox.DefaultBatchBytes}} {
			b.Run(fmt.Sprintf("line=%dB/batch=%s", c.size, cfg.name), func(b *testing.B) {
				var peak uint64
				dir := b.TempDir()
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					if _, err := raw.Exec(`DELETE FROM outbox_progress`); err != nil {
						b.Fatal(err)
					}
					j, err := journal.OpenFile(filepath.Join(dir, fmt.Sprintf("j-%d.jsonl", i)))
					if err != nil {
						b.Fatal(err)
					}
					runtime.GC()
					before := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
					metrics.Read(before)
					stop := make(chan struct{})
					sampled := heapPeak(stop)
					b.StartTimer()
					err = outboxtest.NewRelay(b, s, j, "run", outbox.WithBatchBytes(cfg.bytes)).Flush(ctx)
					b.StopTimer()
					close(stop)
					top := <-sampled
					peak = max(peak, top-min(top, before[0].Value.Uint64()))
					j.Close()
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
				b.ReportMetric(float64(c.lines*b.N)/b.Elapsed().Seconds(), "lines/s")
			})
		}
		raw.Close()
	}
}
