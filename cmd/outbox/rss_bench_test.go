// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// rssBook makes dir/book.db, the book an engine leaves that enqueued every line of the journal
// rssJournal wrote in dir with its once key and projected it there, and started once more: every run
// projected up to its last seq and forgotten there, each key in the ledger with its line's digest and
// no bytes, no run marked for recovery, the sink's end marked. A book already there (dir/book-done)
// is used as it is.
//
// It is made from the journal, not by enqueueing: 10^7 EnqueueOnceTx and the Recover that projects
// them take about two and a half hours here, where this takes minutes. The book is the same, because
// it is made by the library's own paths that leave those rows, only fed from the journal:
//
//   - journal.Reconcile (outbox reconcile --yes) reads each line's "once_key" member (rssJournal
//     writes it where journal.Event does) and hands each run's keys to Store.AcceptSinkLines, with
//     LineDigest of the line's bytes: that puts each key into the ledger through the statement the
//     relay's record uses (LedgerPut: the key, run, seq and digest, no line), whose insert trigger
//     counts the row in its run's figures (last_seq, lines, ledger_lines), and records the run
//     projected up to the journal's last seq with that seq as its last (outbox_progress, whose
//     triggers copy it into the figures). The relay's record of a line it appended leaves that row,
//     those progress figures and those counts: its line digested from the same bytes it appended.
//   - A start's Recover then does what it did after the relay's projection: it checks the book
//     against the journal (a book behind its journal stops it), moves each run's forgotten position
//     up to its projected one (there is no row without a key to drop), clears each finished run's
//     mark for recovery, and records the journal's end as the book's mark.
//
// What differs is what nothing reads for these rows: outbox_runs.counted_to stays 0 (it tells rows
// the store counted at enqueue, counted=1, from others, and the ledger rows LedgerPut inserts are
// counted by the trigger either way), and the mark names the journal's end where the slow path's
// names where the journal ended when its relay first checked (empty). `outbox stats` reads the same
// figures from either; `outbox check` finds no difference, which the benchmark requires of every run.
func rssBook(tb testing.TB, dir string, lines, runs int) {
	tb.Helper()
	done := filepath.Join(dir, "book-done")
	if _, err := os.Stat(done); err == nil {
		return
	}
	ctx := context.Background()
	dbPath, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	for _, p := range []string{dbPath, dbPath + "-wal", dbPath + "-shm"} { // a book made halfway
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			tb.Fatal(err)
		}
	}
	began := time.Now()
	s, err := outbox.Open(ctx, dbPath, outbox.WithDurability(outbox.DurabilityNormal))
	if err != nil {
		tb.Fatal(err)
	}
	rep, err := journal.Reconcile(ctx, s, jDir, true)
	if err != nil {
		tb.Fatal(err)
	}
	if !rep.Applied || len(rep.Runs) != runs || rep.Keys != int64(lines/runs*runs) {
		tb.Fatalf("reconcile took %d runs and %d keys (applied %v), want %d and %d", len(rep.Runs), rep.Keys, rep.Applied, runs, lines/runs*runs)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	reconciled := time.Since(began)
	s, err = outbox.Open(ctx, dbPath, outbox.WithDurability(outbox.DurabilityNormal))
	if err != nil {
		tb.Fatal(err)
	}
	j, err := journal.Open(jDir)
	if err != nil {
		tb.Fatal(err)
	}
	relay, err := outbox.NewRelay(s, j, "bench-relay")
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
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("made a book of %d runs and %d once keys from the journal: reconcile %v, start %v",
		runs, lines/runs*runs, reconciled.Round(time.Second), (time.Since(began) - reconciled).Round(time.Second))
}

// rssJournal writes, in dir, a journal of lines lines of about 400 bytes over runs runs, one run
// after another as an engine's starts write them, without a book: the journal directory
// dir/journal, its segments sealed at journal.DefaultSegmentSize, and the same bytes as one file,
// dir/journal.jsonl. Each line is what journal.Event renders for an EnqueueOnce, its once key in its
// "once_key" member (rssBook makes the book from them), at one fixed time.
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
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	cmd.Stderr = io.Discard
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
// projected: the journal written directly (rssJournal), the book made from it (rssBook; 10^7 once
// keys in about 20 minutes here). OUTBOX_RSS_DIR keeps the dataset between runs (made once).
// OUTBOX_BIN names the outbox binary to measure (by default it builds this one). With
// OUTBOX_BASELINE_BIN, an outbox binary built from the code before, it runs that binary's verify and
// check of the same journal as one file beside them (it reads no directory).
// OUTBOX_RSS_VERIFY_ONLY=1 makes no book and measures verify alone. A check that does not say OK,
// having compared every line, fails the benchmark. See docs/BENCHMARKS.md.
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
	rssJournal(b, dir, lines, runs)
	if !verifyOnly {
		rssBook(b, dir, lines, runs)
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
		// said, when set, judges what the command printed: a figure of a run that found the
		// dataset wrong is no figure.
		said func(out string) error
	}
	total := int64(lines / runs * runs)
	probes := []probe{
		{"verify-dir", func() *exec.Cmd { return self("verify", jDir) }, nil},
		{"verify-file", func() *exec.Cmd { return self("verify", jFile) }, nil},
	}
	if !verifyOnly {
		probes = append(probes, probe{"check-dir", func() *exec.Cmd { return self("check", "--db", dbPath, "--journal", jDir) }, func(out string) error {
			// Every journal line compared with its ledger row's digest, and nothing found.
			want := fmt.Sprintf("journal %s: %s, %s; %s compared byte for byte\nOK\n",
				quote(jDir), counted(int64(runs), "run"), lineCounts(total, total), counted(total, "stored line"))
			if !strings.HasSuffix(out, want) {
				return fmt.Errorf("check printed\n%s\nwant it to end with\n%s", out, want)
			}
			return nil
		}})
	}
	if old := os.Getenv("OUTBOX_BASELINE_BIN"); old != "" {
		probes = append(probes, probe{"before-verify-file", func() *exec.Cmd { return exec.Command(old, "verify", jFile) }, nil})
		if !verifyOnly {
			probes = append(probes, probe{"before-check-file", func() *exec.Cmd { return exec.Command(old, "check", "--db", dbPath, "--journal", jFile) }, nil})
		}
	}
	peaks, secs := make([]float64, len(probes)), make([]float64, len(probes))
	for b.Loop() {
		for i, p := range probes {
			var out strings.Builder
			cmd := p.cmd()
			cmd.Stdout = &out
			code, mib, s := peakRSS(b, cmd)
			if code != exitOK {
				b.Fatalf("%s: exit %d\n%s", p.name, code, out.String())
			}
			if p.said != nil {
				if err := p.said(out.String()); err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
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
