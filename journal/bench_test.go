// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// drainBook builds a book holding a backlog of lines of run "run", not yet projected, and returns a
// drain: it copies the book (the timer stopped), opens the sink at a path in the benchmark's
// directory, and times a relay's Flush of the whole backlog into it in batches of batch, checking
// that the sink then ends at the backlog's last seq. Each drain has a fresh copy: a relay forgets
// what it projected, so a book drained once has nothing left to drain.
func drainBook(b *testing.B, backlog, batch int) (drain func(name string, open func(string) (drainSink, error)) time.Duration) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	book := filepath.Join(dir, "book.db")
	s, err := outbox.Open(ctx, book)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		for i := 1; i <= backlog; i++ {
			if _, err := s.EnqueueTx(ctx, tx, "run", journal.Builder("run", "spend", map[string]int{"unit": i, "amount": i % 1000})); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	content, err := os.ReadFile(book)
	if err != nil {
		b.Fatal(err)
	}
	return func(name string, open func(string) (drainSink, error)) time.Duration {
		b.StopTimer()
		path := filepath.Join(dir, name+".db")
		if err := os.WriteFile(path, content, 0o644); err != nil {
			b.Fatal(err)
		}
		s, err := outbox.Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sink, err := open(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		defer sink.Close()
		relay := outboxtest.NewRelay(b, s, sink, "run", outbox.WithBatchSize(batch))
		b.StartTimer()
		t0 := time.Now()
		if err := relay.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if last, err := sink.LastSeq("run"); err != nil || last != int64(backlog) {
			b.Fatalf("%s: the journal ends at seq %d of %d: %v", name, last, backlog, err)
		}
		return d
	}
}

type drainSink interface {
	outbox.Sink
	LastSeq(string) (int64, error)
	Close() error
}

func openDrainFile(p string) (drainSink, error)     { return journal.OpenFile(p + ".jsonl") }
func openDrainSegments(p string) (drainSink, error) { return journal.Open(p) }

// BenchmarkRelayDrainSegments projects the backlog BenchmarkRelayDrain does (20,000 lines, batches of
// 256) into a segmented journal (Open, default segment size), beside the same relay into a single
// file (OpenFile). Each pass drains a fresh copy of one book (the relay forgets what it projected);
// the two alternate within each iteration, so that the disk's drift falls on both; the ratio is the
// file's time over the segments'.
func BenchmarkRelayDrainSegments(b *testing.B) {
	backlog, batch := 20_000, 256
	if testing.Short() {
		backlog = 1000
	}
	drain := drainBook(b, backlog, batch)
	var inFile, inSegments time.Duration
	for i := 0; b.Loop(); i++ {
		inFile += drain(fmt.Sprintf("file-%d", i), openDrainFile)
		inSegments += drain(fmt.Sprintf("segments-%d", i), openDrainSegments)
	}
	n := float64(backlog * b.N)
	b.ReportMetric(n/inFile.Seconds(), "file-lines/s")
	b.ReportMetric(n/inSegments.Seconds(), "segments-lines/s")
	b.ReportMetric(inFile.Seconds()/inSegments.Seconds(), "ratio")
}

// BenchmarkRelayDrain projects a backlog of 20,000 lines from the store into a journal file, beside a
// baseline that appends the same lines, in the same batch size, with one fdatasync per batch and no
// database at all, and beside the same relay into a segmented journal. Each iteration runs one pass
// of each, one after the other, so that the disk's drift (its speed moves by a third within minutes
// here) falls on all alike; every relay pass drains a fresh copy of the book, the whole backlog. The
// ratio is the sum of the baseline's times over the relay's into the file; segments-ratio is the
// file's over the segments'.
func BenchmarkRelayDrain(b *testing.B) {
	backlog, batch := 20_000, 256
	if testing.Short() {
		backlog = 1000
	}
	ctx := context.Background()
	dir := b.TempDir()
	// The baseline's lines are the ones the relay writes, read from a book of the same backlog.
	s, err := outbox.Open(ctx, filepath.Join(dir, "lines.db"))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		for i := 1; i <= backlog; i++ {
			if _, err := s.EnqueueTx(ctx, tx, "run", journal.Builder("run", "spend", map[string]int{"unit": i, "amount": i % 1000})); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	lines, err := s.PendingEvents(ctx, "run", 0, backlog)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	drain := drainBook(b, backlog, batch)

	baseline := func(i int) {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("base-%d.jsonl", i)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for start := 0; start < len(lines); start += batch {
			var buf []byte
			for _, l := range lines[start:min(start+batch, len(lines))] {
				buf = append(append(buf, l.Line...), '\n')
			}
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	var inBase, inRelay, inSegments time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		baseline(i)
		inBase += time.Since(t0)
		inRelay += drain(fmt.Sprintf("relay-%d", i), openDrainFile)
		inSegments += drain(fmt.Sprintf("segments-%d", i), openDrainSegments)
	}
	n := float64(backlog * b.N)
	b.ReportMetric(n/inBase.Seconds(), "baseline-lines/s")
	b.ReportMetric(n/inRelay.Seconds(), "relay-lines/s")
	b.ReportMetric(n/inSegments.Seconds(), "segments-lines/s")
	b.ReportMetric(inBase.Seconds()/inRelay.Seconds(), "ratio")
	b.ReportMetric(inRelay.Seconds()/inSegments.Seconds(), "segments-ratio")
}

// verifyFile writes a journal of about size bytes: 50 interleaved runs of realistic lines.
func verifyFile(b *testing.B, size int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	seqs := make([]int64, 50)
	pad := strings.Repeat("x", 40)
	for written := 0; written < size; {
		r := written % 50
		seqs[r]++
		n, _ := fmt.Fprintf(w, `{"engine_run_id":"run-%02d-0123456789abcdef","seq":%d,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":%d,"amount":%d,"note":"%s"}}`+"\n",
			r, seqs[r], written, written%1000, pad)
		written += n
	}
	w.Flush()
	f.Close()
	return path
}

// BenchmarkVerify checks a 100 MB journal, beside reading the same file line by line with no parsing.
// Each iteration reads the file once and verifies it once, one after the other, so that the machine's
// drift falls on both alike (on these shared machines a core's speed moves by a quarter between
// consecutive runs); the ratio is the sum of the read's times over the verifier's.
func BenchmarkVerify(b *testing.B) { benchVerify(b, false) }

// BenchmarkVerifyStream is BenchmarkVerify on an input that cannot be read back (a pipe, a broker's
// stream): Verify then keeps a SHA-256 of every line.
func BenchmarkVerifyStream(b *testing.B) { benchVerify(b, true) }

func benchVerify(b *testing.B, stream bool) {
	size := 100 << 20
	if testing.Short() {
		size = 1 << 20
	}
	path := verifyFile(b, size)
	st, _ := os.Stat(path)
	readLines := func() int {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		r := bufio.NewReaderSize(f, 1<<20)
		lines := 0
		for {
			if _, err := r.ReadSlice('\n'); err != nil {
				break
			}
			lines++
		}
		return lines
	}
	verify := func() int {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var r io.Reader = f
		if stream {
			r = struct{ io.Reader }{f}
		}
		rep, err := journal.Verify(r)
		if err != nil {
			b.Fatal(err)
		}
		return rep.Lines
	}
	var inRead, inVerify time.Duration
	lines := 0
	for b.Loop() {
		t0 := time.Now()
		lines = readLines()
		t1 := time.Now()
		if n := verify(); n != lines {
			b.Fatalf("verified %d lines of %d", n, lines)
		}
		inRead, inVerify = inRead+t1.Sub(t0), inVerify+time.Since(t1)
	}
	n, mb := float64(lines*b.N), float64(st.Size())*float64(b.N)/1e6
	b.ReportMetric(n/inRead.Seconds(), "read-lines/s")
	b.ReportMetric(mb/inRead.Seconds(), "read-MB/s")
	b.ReportMetric(n/inVerify.Seconds(), "verify-lines/s")
	b.ReportMetric(mb/inVerify.Seconds(), "verify-MB/s")
	b.ReportMetric(inRead.Seconds()/inVerify.Seconds(), "ratio")
}

// BenchmarkFileIndex opens a 100 MB journal of 50 interleaved runs and asks a run's last seq, which
// reads the whole file once to index it: what the first append after an engine's start costs.
func BenchmarkFileIndex(b *testing.B) {
	size := 100 << 20
	if testing.Short() {
		size = 1 << 20
	}
	path := verifyFile(b, size)
	st, _ := os.Stat(path)
	for b.Loop() {
		j, err := journal.OpenFile(path)
		if err != nil {
			b.Fatal(err)
		}
		if last, err := j.LastSeq("run-00-0123456789abcdef"); err != nil || last == 0 {
			b.Fatalf("LastSeq = (%d, %v)", last, err)
		}
		j.Close()
	}
	b.ReportMetric(float64(st.Size())*float64(b.N)/1e6/b.Elapsed().Seconds(), "MB/s")
}
