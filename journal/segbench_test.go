// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
