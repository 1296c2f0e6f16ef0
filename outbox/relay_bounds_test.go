// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// batchSink keeps every batch it is given, copied, as a sink that holds nothing back would.
type batchSink struct {
	mu      sync.Mutex
	batches [][]outbox.EventLine
}

func (b *batchSink) Append(_ context.Context, _ string, lines []outbox.EventLine) error {
	cp := make([]outbox.EventLine, len(lines))
	for i, l := range lines {
		cp[i] = outbox.EventLine{Seq: l.Seq, Line: append([]byte(nil), l.Line...)}
	}
	b.mu.Lock()
	b.batches = append(b.batches, cp)
	b.mu.Unlock()
	return nil
}

func openStore(t testing.TB, opts ...outbox.Option) *outbox.Store {
	t.Helper()
	// Open's context has a deadline: a short operation timeout among opts is for the calls under test.
	s, err := outbox.Open(outboxtest.Patient(t), filepath.Join(t.TempDir(), "book.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// enqueueSized enqueues one journal line per size, each padded to about that many bytes, in
// transactions of a few lines so that no transaction holds much.
func enqueueSized(t testing.TB, s *outbox.Store, runID string, sizes []int) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < len(sizes); start += 8 {
		var builds []outbox.EventBuilder
		for _, n := range sizes[start:min(start+8, len(sizes))] {
			builds = append(builds, journal.Builder(runID, "blob", strings.Repeat("x", max(n-120, 1))))
		}
		if _, err := s.EnqueueEvents(ctx, runID, builds); err != nil {
			t.Fatal(err)
		}
	}
}

func repeatSize(n, size int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = size
	}
	return out
}

func TestRelayBatchesAreBoundedInBytesAndHoldAtLeastOneLine(t *testing.T) {
	const kib = 1 << 10
	for _, c := range []struct {
		name  string
		bound int // 0: the default
		sizes []int
	}{
		{"small lines, the line count binds", 0, repeatSize(600, 200)},
		{"1 MiB lines, the default bound", 0, repeatSize(12, 1<<20)},
		{"mixed sizes", 64 * kib, append(append(repeatSize(40, 10*kib), 100*kib, 3*kib, 200*kib), repeatSize(30, 30*kib)...)},
		{"every line larger than the bound", 8 * kib, repeatSize(5, 20*kib)},
		{"a one-byte bound", 1, repeatSize(5, 300)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t)
			enqueueSized(t, s, "run", c.sizes)
			sink := &batchSink{}
			bound := outbox.DefaultBatchBytes
			var opts []outbox.RelayOption
			if c.bound > 0 {
				bound = c.bound
				opts = append(opts, outbox.WithBatchBytes(c.bound))
			}
			if err := outboxtest.NewRelay(t, s, sink, "run", opts...).Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			next := int64(1)
			for i, b := range sink.batches {
				if len(b) == 0 {
					t.Fatalf("batch %d is empty", i)
				}
				bytes := 0
				for _, l := range b {
					if l.Seq != next {
						t.Fatalf("batch %d: seq %d where %d belongs", i, l.Seq, next)
					}
					next++
					bytes += len(l.Line)
				}
				if len(b) > 1 && bytes > bound {
					t.Errorf("batch %d: %d lines of %d bytes, over the bound of %d", i, len(b), bytes, bound)
				}
				if len(b) > outbox.DefaultBatchSize {
					t.Errorf("batch %d: %d lines, over the line bound", i, len(b))
				}
			}
			if got := next - 1; got != int64(len(c.sizes)) {
				t.Fatalf("the sink got %d lines, want %d", got, len(c.sizes))
			}
		})
	}
}

func TestWithBatchBytesRefusesLessThanOneByte(t *testing.T) {
	s := openStore(t)
	for _, n := range []int{0, -1} {
		r, err := outbox.NewRelay(s, &batchSink{}, "run", outbox.WithBatchBytes(n))
		if r != nil || err == nil || !strings.Contains(err.Error(), "batch bytes") {
			t.Errorf("WithBatchBytes(%d): %v, want an error naming the option", n, err)
		}
	}
}

// heapPeak samples the bytes of live and not yet swept heap objects until stop is closed, and returns
// the highest sample.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// relayPeakHeap drains lines of lineSize bytes from a fresh store into a journal file with the given
// options, and returns the highest heap sampled during the drain, above the heap before it.
func relayPeakHeap(tb testing.TB, lines, lineSize int, opts ...outbox.RelayOption) uint64 {
	tb.Helper()
	ctx := context.Background()
	s := openStore(tb)
	enqueueSized(tb, s, "run", repeatSize(lines, lineSize))
	j, err := journal.OpenFile(filepath.Join(tb.TempDir(), "journal.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	defer j.Close()
	runtime.GC()
	before := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(before)
	stop := make(chan struct{})
	peak := heapPeak(stop)
	err = outboxtest.NewRelay(tb, s, j, "run", opts...).Flush(ctx)
	close(stop)
	if err != nil {
		tb.Fatal(err)
	}
	top := <-peak
	return top - min(before[0].Value.Uint64(), top)
}

// relayMemoryLines is how many 1 MiB lines the memory test drains: a few dozen in make test,
// OUTBOX_RELAY_MEMORY_LINES in make reliability.
func relayMemoryLines(t *testing.T) int { return envCount(t, "OUTBOX_RELAY_MEMORY_LINES", 48) }

// envCount reads a positive count from the environment variable name, or returns def when it is unset.
func envCount(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q, want a count of at least 1", name, v)
	}
	return n
}

// A relay's memory follows WithBatchBytes, not the backlog: draining lines of 1 MiB, the heap stays
// near two batches (the relay's lines and the journal's copy of a batch) however many lines wait. With
// batches bounded by lines only, a drain of 48 such lines held all 48, twice.
func TestRelayMemoryIsBoundedByBatchBytesNotByTheBacklog(t *testing.T) {
	n := relayMemoryLines(t)
	for _, size := range []int{1 << 20, 4 << 20} {
		t.Run(fmt.Sprintf("%d lines of %d MiB", n/(size>>20), size>>20), func(t *testing.T) {
			lines := max(n/(size>>20), 4)
			peak := relayPeakHeap(t, lines, size)
			// The relay holds at most DefaultBatchBytes plus one line, the journal copies one
			// batch, and the collector lets the heap grow to twice what is live: about 20 MiB
			// for 1 MiB lines. The bound leaves room for the collector's timing.
			bound := uint64(8*outbox.DefaultBatchBytes + 4*size)
			t.Logf("peak heap above the start: %.1f MiB (bound %d MiB; the backlog %d MiB)",
				float64(peak)/(1<<20), bound>>20, lines*size>>20)
			if peak > bound {
				t.Errorf("peak heap %.1f MiB during the drain, want under %d MiB", float64(peak)/(1<<20), bound>>20)
			}
		})
	}
}
