// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// manyRuns is a journal of runs runs of one line each, as an engine that starts a run per job writes.
func manyRuns(runs int) []byte {
	var b bytes.Buffer
	for i := range runs {
		fmt.Fprintf(&b, `{"engine_run_id":"run-%07d","seq":1,"type":"run_started","at":"2026-11-30T01:59:17.123456789Z","data":null}`+"\n", i)
	}
	return b.Bytes()
}

// retainedPerRun verifies in and returns the heap the Verifier holds afterwards, per run.
func retainedPerRun(tb testing.TB, in []byte, runs int, stream bool) float64 {
	tb.Helper()
	var r io.Reader = bytes.NewReader(in)
	if stream {
		r = struct{ io.Reader }{r}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v, err := verify(r, nil)
	if err != nil {
		tb.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(v.runs) != runs {
		tb.Fatalf("%d runs verified, want %d", len(v.runs), runs)
	}
	runtime.KeepAlive(v)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(runs)
}

// TestVerifyKeepsASmallConstantPerRun: a journal of single-line runs costs Verify a small constant per
// run, not a window of digests per run: only the most recent runs keep one.
// OUTBOX_VERIFY_RUNS sets the count (make reliability: a million).
func TestVerifyKeepsASmallConstantPerRun(t *testing.T) {
	runs := 100_000
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_VERIFY_RUNS")); err == nil {
		runs = n
	}
	in := manyRuns(runs)
	for _, mode := range []struct {
		name   string
		stream bool
		record float64
	}{{"file", false, 8}, {"stream", true, 32}} {
		perRun := retainedPerRun(t, in, runs, mode.stream)
		t.Logf("%s: %d runs, %.0f bytes per run", mode.name, runs, perRun)
		if limit := 256 + mode.record; perRun > limit {
			t.Errorf("%s: %.0f bytes per run, more than %.0f", mode.name, perRun, limit)
		}
	}
}

// BenchmarkVerifyManyRuns verifies a journal of single-line runs and reports the heap the Verifier
// holds per run afterwards, beside the journal's own bytes per run.
func BenchmarkVerifyManyRuns(b *testing.B) {
	runs := 1_000_000
	if testing.Short() {
		runs = 10_000
	}
	in := manyRuns(runs)
	for _, stream := range []bool{false, true} {
		name := "file"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			var perRun float64
			for b.Loop() {
				perRun = retainedPerRun(b, in, runs, stream)
			}
			b.ReportMetric(perRun, "heap-B/run")
			b.ReportMetric(float64(len(in))/float64(runs), "journal-B/run")
		})
	}
}

// TestTheFilesIndexKeepsASmallConstantPerRun: a journal of single-line runs costs the File's index
// the run id, its map entry and one span per run.
func TestTheFilesIndexKeepsASmallConstantPerRun(t *testing.T) {
	const runs = 100_000
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if err := os.WriteFile(path, manyRuns(runs), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := j.LastSeq("run-0000001"); err != nil {
		t.Fatal(err)
	}
	j.rbuf = nil // the reader's buffer, a MiB, is not the index
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(j.runs.runs) != runs {
		t.Fatalf("%d runs indexed, want %d", len(j.runs.runs), runs)
	}
	perRun := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / runs
	t.Logf("%d runs, %.0f bytes per run (run ids of 11 bytes)", runs, perRun)
	if perRun > 200 {
		t.Errorf("%.0f bytes per run, more than 200", perRun)
	}
}
