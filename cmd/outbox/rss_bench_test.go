// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// envInt reads a whole number from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// rssDataset makes, in dir, a book of lines once-keyed lines over runs runs, every one projected
// (the ledger keeps each key and its line's digest) into the journal directory dir/journal, and the
// same journal as one file, dir/journal.jsonl, for the code before directories. A dataset already
// there (dir/done) is used as it is, so that several runs of the benchmark share one.
func rssDataset(tb testing.TB, dir string, lines, runs int) {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return
	}
	ctx := context.Background()
	dbPath, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	s, err := outbox.Open(ctx, dbPath, outbox.WithDurability(outbox.DurabilityNormal))
	if err != nil {
		tb.Fatal(err)
	}
	// About 400 bytes a line, as the probe: 10^7 lines make a 4 GB journal.
	pad := strings.Repeat("p", 250)
	const perTx = 2000
	for r := range runs {
		run := fmt.Sprintf("engine-%07d", r)
		n := lines / runs
		for from := 0; from < n; from += perTx {
			err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				for i := from; i < min(from+perTx, n); i++ {
					key := fmt.Sprintf("unit:%d:%d", r, i)
					if _, _, err := s.EnqueueOnceTx(ctx, tx, run, key, journal.Builder(run, "unit_done", map[string]any{"unit": i, "pad": pad})); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	// A start recovers what the runs before it left: every line projected, the ledger's lines
	// replaced by their digests.
	s, err = outbox.Open(ctx, dbPath, outbox.WithDurability(outbox.DurabilityNormal))
	if err != nil {
		tb.Fatal(err)
	}
	j, err := journal.Open(jDir)
	if err != nil {
		tb.Fatal(err)
	}
	relay, err := outbox.NewRelay(s, j, "bench-relay", outbox.WithBatchSize(1024))
	if err != nil {
		tb.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := j.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	segs, err := journal.SegmentsOf(jDir)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, sg := range segs {
		in, err := os.Open(sg.Path)
		if err != nil {
			tb.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// rssJournal writes, in dir, a journal of lines lines of about 400 bytes over runs runs, one run
// after another as an engine's starts write them, without a book: the journal directory
// dir/journal, its segments sealed at journal.DefaultSegmentSize, and the same bytes as one file,
// dir/journal.jsonl. It is quicker to make than rssDataset's book, for verify alone.
func rssJournal(tb testing.TB, dir string, lines, runs int) {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return
	}
	jDir := filepath.Join(dir, "journal")
	if err := os.Mkdir(jDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	file, err := os.Create(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	pad := strings.Repeat("p", 250)
	var seg *os.File
	var pos, segStart int64
	buf := make([]byte, 0, 1<<20)
	flush := func() {
		if _, err := seg.Write(buf); err != nil {
			tb.Fatal(err)
		}
		if _, err := file.Write(buf); err != nil {
			tb.Fatal(err)
		}
		buf = buf[:0]
	}
	for r := range runs {
		run := fmt.Sprintf("engine-%07d", r)
		for seq := 1; seq <= lines/runs; seq++ {
			if seg == nil || pos-segStart >= journal.DefaultSegmentSize {
				if seg != nil {
					flush()
					seg.Close()
				}
				if seg, err = os.Create(filepath.Join(jDir, fmt.Sprintf("%020d.jsonl", pos))); err != nil {
					tb.Fatal(err)
				}
				segStart = pos
			}
			n := len(buf)
			buf = fmt.Appendf(buf, `{"engine_run_id":%q,"seq":%d,"type":"unit_done","at":"2026-12-03T14:00:00.000000000Z","once_key":"unit:%d:%d","data":{"unit":%d,"pad":%q}}`+"\n",
				run, seq, r, seq, seq, pad)
			pos += int64(len(buf) - n)
			if len(buf) > 1<<20-1024 {
				flush()
			}
		}
	}
	flush()
	if err := seg.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := file.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// peakRSS runs cmd to its end under GNU time and returns its exit status and the peak of its
// resident set, in MiB, as the kernel counted it (ru_maxrss). The rusage Go's own wait gives is no
// measure: Go starts a child with vfork, and the kernel carries the parent's high-water mark into
// the child's across exec; time forks from a small process, whose mark is a megabyte or two.
func peakRSS(tb testing.TB, cmd *exec.Cmd) (code int, mib, seconds float64) {
	tb.Helper()
	const gnuTime = "/usr/bin/time"
	if _, err := os.Stat(gnuTime); err != nil {
		tb.Skip("no " + gnuTime + " here to measure a child's peak RSS with")
	}
	out, err := os.CreateTemp(tb.TempDir(), "rss")
	if err != nil {
		tb.Fatal(err)
	}
	out.Close()
	cmd.Args = append([]string{gnuTime, "-o", out.Name(), "-f", "%M %e"}, cmd.Args...)
	cmd.Path = gnuTime
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	err = cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		tb.Fatalf("%v: %v", cmd.Args, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		tb.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		tb.Fatalf("%v: time wrote %q", cmd.Args, b)
	}
	kib, err := strconv.Atoi(fields[len(fields)-2])
	if err == nil {
		seconds, err = strconv.ParseFloat(fields[len(fields)-1], 64)
	}
	if err != nil {
		tb.Fatalf("%v: time wrote %q", cmd.Args, b)
	}
	return cmd.ProcessState.ExitCode(), float64(kib) / 1024, seconds
}

// BenchmarkVerifyCheckPeakRSS measures the peak resident memory of `outbox verify` and `outbox check`
// as processes of their own, against a journal of OUTBOX_RSS_LINES once-keyed lines of about 400
// bytes (default 10^6, 400 MB; -short 10^4) over OUTBOX_RSS_RUNS runs (default 1,000), all
// projected. OUTBOX_RSS_DIR keeps the dataset between runs (made once). OUTBOX_BIN names the outbox
// binary to measure (by default it builds this one). With OUTBOX_BASELINE_BIN,
// an outbox binary built from the code before, it runs that binary's verify and check of the same
// journal as one file beside them (it reads no directory). OUTBOX_RSS_VERIFY_ONLY=1 writes the
// journal directly, with no book, and measures verify alone: a 4 GB journal is made in a minute or
// two, where a book of 10^7 once keys takes an hour here. See docs/BENCHMARKS.md.
func BenchmarkVerifyCheckPeakRSS(b *testing.B) {
	lines, runs := envInt("OUTBOX_RSS_LINES", 1_000_000), envInt("OUTBOX_RSS_RUNS", 1_000)
	if testing.Short() {
		lines, runs = 10_000, 10
	}
	dir := os.Getenv("OUTBOX_RSS_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	verifyOnly := os.Getenv("OUTBOX_RSS_VERIFY_ONLY") != ""
	if verifyOnly {
		rssJournal(b, dir, lines, runs)
	} else {
		rssDataset(b, dir, lines, runs)
	}
	dbPath, jDir, jFile := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal"), filepath.Join(dir, "journal.jsonl")
	st, err := os.Stat(jFile)
	if err != nil {
		b.Fatal(err)
	}
	// The command as users run it: a binary of its own, not this test binary.
	exe := os.Getenv("OUTBOX_BIN")
	if exe == "" {
		exe = filepath.Join(b.TempDir(), "outbox")
		if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	self := func(args ...string) *exec.Cmd { return exec.Command(exe, args...) }
	type probe struct {
		name string
		cmd  func() *exec.Cmd
	}
	probes := []probe{
		{"verify-dir", func() *exec.Cmd { return self("verify", jDir) }},
		{"verify-file", func() *exec.Cmd { return self("verify", jFile) }},
	}
	if !verifyOnly {
		probes = append(probes, probe{"check-dir", func() *exec.Cmd { return self("check", "--db", dbPath, "--journal", jDir) }})
	}
	if old := os.Getenv("OUTBOX_BASELINE_BIN"); old != "" {
		probes = append(probes, probe{"before-verify-file", func() *exec.Cmd { return exec.Command(old, "verify", jFile) }})
		if !verifyOnly {
			probes = append(probes, probe{"before-check-file", func() *exec.Cmd { return exec.Command(old, "check", "--db", dbPath, "--journal", jFile) }})
		}
	}
	peaks, secs := make([]float64, len(probes)), make([]float64, len(probes))
	for b.Loop() {
		for i, p := range probes {
			code, mib, s := peakRSS(b, p.cmd())
			if code != exitOK {
				b.Fatalf("%s: exit %d", p.name, code)
			}
			peaks[i], secs[i] = max(peaks[i], mib), max(secs[i], s)
		}
	}
	b.ReportMetric(float64(st.Size())/(1<<20), "journal-MiB")
	for i, p := range probes {
		b.ReportMetric(peaks[i], p.name+"-MiB")
		b.ReportMetric(secs[i], p.name+"-s")
	}
}
