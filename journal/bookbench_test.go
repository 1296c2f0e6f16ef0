// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// benchBookRuns is the benchmarks' 10^5 runs, or 10^4 under -short, where make test runs each
// benchmark once so that it does not rot: making a book of 10^5 runs was most of that step's time.
func benchBookRuns() int {
	if testing.Short() {
		return 10_000
	}
	return 100_000
}

// benchRunsBook makes a book of runs runs, each projected up to its one line and forgotten, and a
// journal of 1 MiB segments holding each run's line, indexed.
func benchRunsBook(b *testing.B, runs int) (dbPath, dir string) {
	b.Helper()
	ctx := context.Background()
	root := b.TempDir()
	dbPath, dir = filepath.Join(root, "book.db"), filepath.Join(root, "journal")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		b.Fatal(err)
	}
	for start := 0; start < runs; start += 5000 {
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			for i := start; i < min(start+5000, runs); i++ {
				run := fmt.Sprintf("run-%06d", i)
				if _, err := s.EnqueueTx(ctx, tx, run, Builder(run, "run_started", nil)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	raw := outboxtest.RawDBRW(b, dbPath)
	if _, err := raw.Exec(`INSERT INTO outbox_progress (engine_run_id, projected)
		SELECT engine_run_id, last_seq FROM outbox_runs WHERE true
		ON CONFLICT (engine_run_id) DO UPDATE SET projected = excluded.projected`); err != nil {
		b.Fatal(err)
	}
	raw.Close()

	// The journal's segments are written by hand: an Append per run would sync 10^5 times.
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("p", 100)
	var seg []byte
	var base int64
	flush := func() {
		if err := os.WriteFile(filepath.Join(dir, segmentName(base)), seg, 0o644); err != nil {
			b.Fatal(err)
		}
		base += int64(len(seg))
		seg = seg[:0]
	}
	for i := range runs {
		seg = fmt.Appendf(seg, `{"engine_run_id":"run-%06d","seq":1,"x":%q}`+"\n", i, pad)
		if len(seg) >= 1<<20 {
			flush()
		}
	}
	flush()
	j, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := j.SinkRuns(ctx); err != nil { // writes the sealed segments' indexes
		b.Fatal(err)
	}
	j.Close()

	s, err = outbox.Open(ctx, dbPath)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	j, err = Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	relay, err := outbox.NewRelay(s, j, "setup")
	if err != nil {
		b.Fatal(err)
	}
	if err := relay.Recover(ctx); err != nil { // forgets the projected rows, and checks the book
		b.Fatal(err)
	}
	return dbPath, dir
}

// BenchmarkStartBookCheck measures a start beside a journal of 10^5 runs: journal.Open, NewRelay and
// a Recover with nothing pending, with the comparison of the journal's runs with the book (a point
// lookup a run) and without it (WithBookCheck(false)). The book is open already.
func BenchmarkStartBookCheck(b *testing.B) {
	runs := benchBookRuns()
	dbPath, dir := benchRunsBook(b, runs)
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, check := range []bool{true, false} {
		b.Run(fmt.Sprintf("check=%v", check), func(b *testing.B) {
			for b.Loop() {
				j, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				relay, err := outbox.NewRelay(s, j, "bench", outbox.WithBookCheck(check))
				if err != nil {
					b.Fatal(err)
				}
				if err := relay.Recover(ctx); err != nil {
					b.Fatal(err)
				}
				j.Close()
			}
			b.ReportMetric(float64(runs), "runs")
		})
	}
}

// BenchmarkBookLacks measures the comparison alone: the book's point lookups for 10^5 listed runs.
func BenchmarkBookLacks(b *testing.B) {
	runs := benchBookRuns()
	dbPath, dir := benchRunsBook(b, runs)
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	j, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	listed, err := j.SinkRuns(ctx)
	if err != nil || len(listed) != runs {
		b.Fatalf("%d runs, %v", len(listed), err)
	}
	for b.Loop() {
		if n, _, err := s.BookLacks(ctx, listed, 5); err != nil || n != 0 {
			b.Fatalf("%d runs lacking, %v", n, err)
		}
	}
}

// everyRun is the journal with its listing since a mark turned into the full one: the book check as
// it was before the book kept its mark.
type everyRun struct{ *Journal }

func (e everyRun) SinkRunsSince(ctx context.Context, _ []byte) ([]outbox.SinkRun, []byte, error) {
	return e.Journal.SinkRunsSince(ctx, nil)
}

// BenchmarkStartBookCheckSinceMark measures the start's book check beside a journal of 10^5 runs,
// all of them before the book's mark: journal.Open, NewRelay and a Recover with nothing pending,
// comparing every run with the book (full), only the runs with lines after the mark (since), and
// none (off: WithBookCheck(false), what the start costs without the check).
func BenchmarkStartBookCheckSinceMark(b *testing.B) {
	runs := benchBookRuns()
	dbPath, dir := benchRunsBook(b, runs)
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, mode := range []string{"full", "since", "off"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				j, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				var sink outbox.Sink = j
				if mode == "full" {
					sink = everyRun{j}
				}
				relay, err := outbox.NewRelay(s, sink, "bench", outbox.WithBookCheck(mode != "off"))
				if err != nil {
					b.Fatal(err)
				}
				if err := relay.Recover(ctx); err != nil {
					b.Fatal(err)
				}
				j.Close()
			}
			b.ReportMetric(float64(runs), "runs")
		})
	}
}
