// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// heapPeak samples the bytes of live and not yet swept heap objects until stop is closed, and returns
// the highest sample.
func heapPeak(stop <-chan struct{}) <-chan [2]uint64 {
	out := make(chan [2]uint64, 1)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		var peak [2]uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak[0] = max(peak[0], sample[0].Value.Uint64())
			peak[1] = max(peak[1], sample[1].Value.Uint64())
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

// longJournal writes a journal of n lines of size bytes, one run, with journal.File.
func longJournal(tb testing.TB, n, size int) string {
	tb.Helper()
	path := journalPath(tb)
	j, err := journal.OpenFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer j.Close()
	pad := strings.Repeat("x", size-len(`{"engine_run_id":"run","seq":1000000,"type":"unit","pad":""}`))
	batch := max(1, (4<<20)/size)
	for done := 0; done < n; {
		lines := make([]outbox.EventLine, min(batch, n-done))
		for i := range lines {
			seq := int64(done + i + 1)
			lines[i] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":"run","seq":%7d,"type":"unit","pad":"%s"}`, seq, pad)}
		}
		if err := j.Append(context.Background(), "run", lines); err != nil {
			tb.Fatal(err)
		}
		done += len(lines)
	}
	return path
}

// applyFilePeakHeap applies the journal at path into a fresh inbox and returns the highest heap
// sampled during the call above the heap before it, the highest live heap (as of the last
// collection), and the report.
func applyFilePeakHeap(tb testing.TB, path string, h Handler, opts ...Option) (peak, live uint64, rep Report) {
	tb.Helper()
	c := newConsumer(tb, opts...)
	runtime.GC()
	before := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(before)
	stop := make(chan struct{})
	peaks := heapPeak(stop)
	rep, err := c.in.ApplyFile(context.Background(), path, h)
	close(stop)
	if err != nil {
		tb.Fatal(err)
	}
	top := <-peaks
	return top[0] - min(before[0].Value.Uint64(), top[0]), top[1], rep
}

func countHandler(ctx context.Context, tx *sql.Tx, ev Event) error { return nil }

// fileMemoryLines is how many lines, of how many bytes, the memory test applies: 16,000 of 4 KiB
// (64 MiB) in make test; OUTBOX_INBOX_FILE_LINES lines of 200 bytes in make reliability (1,000,000:
// 191 MiB).
func fileMemoryLines(t *testing.T) (lines, size int) {
	v := os.Getenv("OUTBOX_INBOX_FILE_LINES")
	if v == "" {
		return 16_000, 4096
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("OUTBOX_INBOX_FILE_LINES=%q, want a count of at least 1", v)
	}
	return n, 200
}

// ApplyFile's memory follows its batch bounds, not the journal: the heap stays near a few batches
// (the lines read, their keys, the driver's copies) beside what SQLite holds, however long the file.
func TestApplyFileKeepsABoundedHeapWhateverTheJournalsLength(t *testing.T) {
	n, lineSize := fileMemoryLines(t)
	path := longJournal(t, n, lineSize)
	size := int64(n) * int64(lineSize+1)
	const batchBytes = 1 << 20
	peak, live, rep := applyFilePeakHeap(t, path, countHandler, WithDurability(outbox.DurabilityNormal), WithBatchBytes(batchBytes))
	if rep.Applied != n {
		t.Fatalf("applied %d of %d", rep.Applied, n)
	}
	// Measured: about 16 MiB live (most of it SQLite's, for its cache) and 31 MiB of objects at the
	// peak, the collector letting the heap grow to twice what is live, from 100,000 lines on and
	// the same at 1,000,000. The bound is under the file's size and does not grow with it.
	const bound = 48 << 20
	t.Logf("%d lines of %d bytes (%d MiB): peak heap above the start %.1f MiB, peak live heap %.1f MiB (bound %d MiB)",
		n, lineSize, size>>20, float64(peak)/(1<<20), float64(live)/(1<<20), bound>>20)
	if peak > bound {
		t.Errorf("peak heap %.1f MiB while applying a %d MiB journal, want under %d MiB", float64(peak)/(1<<20), size>>20, bound>>20)
	}
}
