// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// startJournal builds, in dir, a journal of about size bytes at the default segment size, 100 runs
// of 200-byte lines interleaved in batches of 1,000, with its last segment just short of a seal (the
// start that reads the most of it). The full segments before the last two are written directly and
// their indexes made by the journal's own rebuild (a first Open and LastSeq); the rest goes through
// Append, so that the last seal, its index and the last segment's checkpoints are the real ones.
func startJournal(b *testing.B, dir string, size int64) {
	b.Helper()
	const seg = journal.DefaultSegmentSize
	tail := int64(seg - 1<<20)
	sealed := int64(0) // how many segments the journal has before its last
	if size > tail {
		sealed = max(1, (size-tail+seg/2)/seg)
	} else {
		tail = size
	}
	direct := max(0, sealed-1)
	last := map[string]int64{}
	pad := strings.Repeat("p", 150)
	batch := func(i int) (string, []outbox.EventLine, int64) {
		run := fmt.Sprintf("run-%03d", i%100)
		lines := make([]outbox.EventLine, 1000)
		var n int64
		for k := range lines {
			last[run]++
			lines[k] = outbox.EventLine{Seq: last[run], Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"x":%q}`, run, last[run], pad)}
			n += int64(len(lines[k].Line)) + 1
		}
		return run, lines, n
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var pos int64
	i := 0
	for range direct {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%020d.jsonl", pos)))
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		var n int64
		for {
			run, lines, m := batch(i)
			if n+m > seg {
				// Not written: put the seqs back for the next segment's first batch.
				last[run] -= int64(len(lines))
				break
			}
			for _, l := range lines {
				w.Write(l.Line)
				w.WriteByte('\n')
			}
			n += m
			i++
		}
		// Synced, so that the disk is not still writing them back under the starts measured.
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		pos += n
	}
	if direct > 0 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d.jsonl", pos)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	j, err := journal.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	if _, err := j.LastSeq("run-000"); err != nil {
		b.Fatal(err)
	}
	// Through Append: the segment before the last (sealed by the append that starts the last) and
	// the last, up to tail bytes, as the journal's roll rule places them.
	var cur int64
	for n := direct; ; i++ {
		run, lines, m := batch(i)
		if cur+m > seg {
			n, cur = n+1, 0
		}
		if n == sealed && cur+m > tail {
			break
		}
		if err := j.Append(context.Background(), run, lines); err != nil {
			b.Fatal(err)
		}
		cur += m
	}
}

// BenchmarkEngineStart times an engine's start over a journal directory of 4 MB, 400 MB and 4 GB
// (the last segment just short of a seal): outbox.Open of a book whose earlier runs are all
// projected, journal.Open, NewRelay, Recover with nothing pending, then the first event enqueued and
// flushed, which is the first Append. Each start is a new run, as an engine's is. The page cache is
// warm (the journal was just written). The 4 GB journal is skipped, saying so, when the temporary
// directory's file system has less than 5 GB free; -short runs the 4 MB journal only.
func BenchmarkEngineStart(b *testing.B) {
	for _, size := range []int64{4 << 20, 400 << 20, 4 << 30} {
		name := fmt.Sprintf("%dMB", size>>20)
		b.Run(name, func(b *testing.B) {
			if size > 4<<20 && testing.Short() {
				b.Skip("-short: the 4 MB journal only")
			}
			root := b.TempDir()
			var fs syscall.Statfs_t
			if err := syscall.Statfs(root, &fs); err == nil && size > 1<<30 && int64(fs.Bavail)*fs.Bsize < size+1<<30 {
				b.Skipf("%s has %d MB free, too little for a %d MB journal", root, int64(fs.Bavail)*fs.Bsize>>20, size>>20)
			}
			dir, book := filepath.Join(root, "journal"), filepath.Join(root, "book.db")
			startJournal(b, dir, size)
			names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
			var total, tail int64
			for _, name := range names {
				st, err := os.Stat(name)
				if err != nil {
					b.Fatal(err)
				}
				total, tail = total+st.Size(), st.Size()
			}
			ctx := context.Background()
			n := 0
			var opens, recovers, appends time.Duration
			for b.Loop() {
				n++
				runID := fmt.Sprintf("engine-%d", n)
				t0 := time.Now()
				s, err := outbox.Open(ctx, book)
				if err != nil {
					b.Fatal(err)
				}
				j, err := journal.Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				// The journal's history is written straight into its segments, not through this book,
				// so the book does not know its runs and the start's comparison would stop the relay;
				// BenchmarkStartBookCheck measures that comparison.
				r, err := outbox.NewRelay(s, j, runID, outbox.WithBookCheck(false))
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := r.Recover(ctx); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
					_, err := s.EnqueueTx(ctx, tx, runID, journal.Builder(runID, "started", map[string]int{"n": n}))
					return err
				}); err != nil {
					b.Fatal(err)
				}
				if err := r.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				opens, recovers, appends = opens+t1.Sub(t0), recovers+t2.Sub(t1), appends+t3.Sub(t2)
				b.StopTimer()
				j.Close()
				s.Close()
				b.StartTimer()
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(n) }
			b.ReportMetric(per(opens), "open-ms")
			b.ReportMetric(per(recovers), "recover-ms")
			b.ReportMetric(per(appends), "first-append-ms")
			b.ReportMetric(float64(total)/1e6, "journal-MB")
			b.ReportMetric(float64(tail)/1e6, "last-segment-MB")
			b.ReportMetric(float64(len(names)), "segments")
		})
	}
}
