// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// BenchmarkAppendChecks measures what File.Append checks before it writes a batch of 256 lines as
// journal.Builder renders them (each line's key, parsed as Verify parses it; the run's last seq; the
// file's length, path and last bytes), beside the write and fdatasync of the same batch on a plain
// file, which is what the checks add to. The ratio is the checks' time over the write's.
func BenchmarkAppendChecks(b *testing.B) {
	const batchLen = 256
	dir := b.TempDir()
	j, err := OpenFile(filepath.Join(dir, "j.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	plain, err := os.Create(filepath.Join(dir, "plain.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	ctx := context.Background()
	var inCheck, inWrite time.Duration
	seq := int64(0)
	for b.Loop() {
		lines := make([]outbox.EventLine, batchLen)
		var buf []byte
		for i := range lines {
			seq++
			l, _ := Builder("run", "spend", map[string]int64{"unit": seq, "amount": seq % 1000})(seq)
			lines[i] = outbox.EventLine{Seq: seq, Line: l}
			buf = append(append(buf, l...), '\n')
		}
		t0 := time.Now()
		j.mu.Lock()
		err := j.checkKeys("run", lines, buf)
		if err == nil {
			err = j.checkUnmodified()
		}
		if err == nil {
			err = j.checkContinues(ctx, "run", lines)
		}
		j.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := plain.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := datasync(plain); err != nil {
			b.Fatal(err)
		}
		inCheck, inWrite = inCheck+t1.Sub(t0), inWrite+time.Since(t1)
		b.StopTimer()
		if err := j.Append(ctx, "run", lines); err != nil { // so the next batch continues the run
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(inCheck.Microseconds())/float64(b.N), "check-µs/batch")
	b.ReportMetric(float64(inWrite.Microseconds())/float64(b.N), "write-µs/batch")
	b.ReportMetric(inCheck.Seconds()/inWrite.Seconds(), "ratio")
}
