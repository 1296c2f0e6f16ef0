// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/journal"
)

// manySegments builds, in dir, a journal of n segments of about 4 KiB: 20 lines each, two batches of
// ten lines of runs that go round 50 run ids, so that a run's lines lie in many segments. The
// segments are written directly and their indexes made by the journal's own rebuild (a first Open and
// LastSeq), as an upgrade or a lost index would; the last segment is the one appended to.
func manySegments(b *testing.B, dir string, n int) {
	b.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	last := map[string]int64{}
	var pos int64
	for k := range n {
		name := filepath.Join(dir, fmt.Sprintf("%020d.jsonl", pos))
		f, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(f)
		if k < n-1 {
			for half := range 2 {
				run := fmt.Sprintf("run-%02d", (2*k+half)%50)
				for range 10 {
					last[run]++
					m, _ := fmt.Fprintf(w, `{"engine_run_id":%q,"seq":%d,"x":"%0160d"}`+"\n", run, last[run], k)
					pos += int64(m)
				}
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	j, err := journal.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	if _, err := j.LastSeq("run-00"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStartOverManySegments times a journal's start, Open and the first LastSeq (what the first
// Append does before it writes), over 10, 1,000 and 10,000 segments of about 4 KiB, every sealed one
// with its index: how a start grows with the number of segments, whatever their size. The page cache
// is warm. -short runs 10 only (building 1,000 indexes takes thousands of fsyncs).
func BenchmarkStartOverManySegments(b *testing.B) {
	for _, n := range []int{10, 1000, 10_000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			if n > 10 && testing.Short() {
				b.Skip("-short: 10 segments only")
			}
			dir := filepath.Join(b.TempDir(), "j")
			manySegments(b, dir, n)
			for b.Loop() {
				j, err := journal.Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				if last, err := j.LastSeq("run-00"); err != nil || last == 0 {
					b.Fatalf("LastSeq = %d, %v", last, err)
				}
				j.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "start-ms")
		})
	}
}
