// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// benchJournal writes a journal of about size bytes, 100 runs of 200-byte lines interleaved in
// batches of 1,000, as a directory of default-sized segments and as a single file with the same
// bytes.
func benchJournal(b *testing.B, size int64) (dir, file string) {
	b.Helper()
	root := b.TempDir()
	dir, file = filepath.Join(root, "dir"), filepath.Join(root, "file.jsonl")
	j, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	last := map[string]int64{}
	pad := strings.Repeat("p", 150)
	var written int64
	for i := 0; written < size; i++ {
		run := fmt.Sprintf("run-%03d", i%100)
		lines := make([]outbox.EventLine, 1000)
		for k := range lines {
			last[run]++
			lines[k] = outbox.EventLine{Seq: last[run], Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"x":%q}`, run, last[run], pad)}
			written += int64(len(lines[k].Line)) + 1
		}
		if err := j.Append(context.Background(), run, lines); err != nil {
			b.Fatal(err)
		}
	}
	j.Close()
	out, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, name := range names {
		c, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		out.Write(c)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	return dir, file
}

// BenchmarkJournalOpen measures a start: Open and the first LastSeq of a segmented journal (default
// segment size), beside OpenFile and the first LastSeq of a single file holding the same bytes. The
// page cache is warm in both; bytes-read/op is what the start read of lines.
func BenchmarkJournalOpen(b *testing.B) {
	for _, size := range []int64{4 << 20, 400 << 20} {
		if size > 4<<20 && testing.Short() {
			continue
		}
		dir, file := benchJournal(b, size)
		b.Run(fmt.Sprintf("segments/%dMB", size>>20), func(b *testing.B) {
			var read int64
			for b.Loop() {
				j, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := j.LastSeq("run-000"); err != nil {
					b.Fatal(err)
				}
				read = j.read
				j.Close()
			}
			b.ReportMetric(float64(read), "bytes-read/op")
		})
		b.Run(fmt.Sprintf("file/%dMB", size>>20), func(b *testing.B) {
			var read int64
			for b.Loop() {
				j, err := OpenFile(file)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := j.LastSeq("run-000"); err != nil {
					b.Fatal(err)
				}
				read = j.read
				j.Close()
			}
			b.ReportMetric(float64(read), "bytes-read/op")
		})
	}
}

// BenchmarkJournalAppendCheckpoints measures what checkpointing the last segment costs the append
// path: 128 MiB appended in the relay's default batch of 256 lines of 200 bytes (one fdatasync
// each) into a journal at the default sizes, beside the same appends with checkpoints off. The two
// alternate within each iteration, so that the disk's drift falls on both; MB/s of each is reported.
func BenchmarkJournalAppendCheckpoints(b *testing.B) {
	total := int64(128 << 20)
	if testing.Short() {
		total = 4 << 20
	}
	pad := strings.Repeat("p", 150)
	run := func(every int64) time.Duration {
		dir := filepath.Join(b.TempDir(), "j")
		j, err := Open(dir, WithCheckpointEvery(every))
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		var seq, written int64
		start := time.Now()
		for written < total {
			lines := make([]outbox.EventLine, 256)
			for k := range lines {
				seq++
				lines[k] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"x":%q}`, seq, pad)}
				written += int64(len(lines[k].Line)) + 1
			}
			if err := j.Append(context.Background(), "r", lines); err != nil {
				b.Fatal(err)
			}
		}
		d := time.Since(start)
		os.RemoveAll(dir)
		return d
	}
	var on, off time.Duration
	for b.Loop() {
		off += run(math.MaxInt64) // an interval no journal reaches: checkpoints off
		on += run(checkpointEvery)
	}
	mb := float64(total) / 1e6 * float64(b.N)
	b.ReportMetric(mb/on.Seconds(), "MB/s-checkpoints")
	b.ReportMetric(mb/off.Seconds(), "MB/s-none")
	b.ReportMetric(off.Seconds()/on.Seconds(), "ratio")
}
