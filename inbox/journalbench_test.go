// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// appendSink is what a relay appends to: a journal.File or a journal.Journal.
type appendSink interface {
	Append(ctx context.Context, runID string, lines []outbox.EventLine) error
	Close() error
}

// stampedSink notes when each Append returned, by seq.
type stampedSink struct {
	appendSink
	mu sync.Mutex
	at map[int64]time.Time
}

func (s *stampedSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	err := s.appendSink.Append(ctx, runID, lines)
	if err == nil {
		now := time.Now()
		s.mu.Lock()
		for _, l := range lines {
			s.at[l.Seq] = now
		}
		s.mu.Unlock()
	}
	return err
}

func (s *stampedSink) when(seq int64) time.Time {
	for {
		s.mu.Lock()
		a, ok := s.at[seq]
		s.mu.Unlock()
		if ok {
			return a
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// BenchmarkFollowJournalLatency measures, for one event at a time, the time from the journal's
// Append returning (the relay projecting it, running beside) to the follower's handler seeing the
// line: FollowJournal on a segmented journal (journal.Open) beside FollowFile on a single file
// (journal.OpenFile), both woken by file notifications. It reports p50, p99 and the worst.
func BenchmarkFollowJournalLatency(b *testing.B) {
	for _, kind := range []string{"file", "segments"} {
		b.Run(kind, func(b *testing.B) {
			s, _ := outboxtest.Setup(b)
			path := filepath.Join(b.TempDir(), "journal")
			var j appendSink
			var err error
			if kind == "file" {
				path += ".jsonl"
				j, err = journal.OpenFile(path)
			} else {
				j, err = journal.Open(path)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			sink := &stampedSink{appendSink: j, at: map[int64]time.Time{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			relay := outboxtest.NewRelay(b, s, sink, "a")
			relayDone := make(chan error, 1)
			go func() { relayDone <- relay.Run(ctx) }()

			type seen struct {
				seq int64
				at  time.Time
			}
			saw := make(chan seen, 1024)
			h := func(ctx context.Context, tx *sql.Tx, ev Event) error {
				saw <- seen{ev.Seq, time.Now()}
				return record(ctx, tx, ev)
			}
			c := newConsumer(b)
			followDone := make(chan error, 1)
			go func() {
				if kind == "file" {
					followDone <- c.in.FollowFile(ctx, path, h)
				} else {
					followDone <- c.in.FollowJournal(ctx, path, h)
				}
			}()

			var lat []time.Duration
			early := 0
			for b.Loop() {
				seq, err := s.EnqueueEvent(ctx, "a", journal.Builder("a", "unit", nil))
				if err != nil {
					b.Fatal(err)
				}
				var done time.Time
				for sn := range saw {
					if sn.seq >= seq {
						done = sn.at
						break
					}
				}
				// The follower can read a line before the writer's fdatasync returns: it is in the
				// page cache. Such a line counts as no latency at all.
				d := done.Sub(sink.when(seq))
				if d < 0 {
					early++
					d = 0
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			cancel()
			if err := <-followDone; !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
			<-relayDone
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(q(0.50), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
			b.ReportMetric(float64(early)/float64(len(lat)), "before-sync-fraction")
		})
	}
}

// BenchmarkApplyJournalCatchUp applies a backlog of 200,000 lines of 200 bytes (10,000 with -short)
// into a fresh inbox, its handler inserting one row per line, at the default durability and batch
// bounds: ApplyJournal on a segmented journal (journal.Open, default segment size) beside ApplyFile
// on a single file holding the same bytes, alternating within each iteration. It reports the lines
// per second of each and the ratio (the file's time over the journal's), and the time of a second
// call of each once caught up (nothing to apply: opening, proving the position, finding the end).
func BenchmarkApplyJournalCatchUp(b *testing.B) {
	n := 200_000
	if testing.Short() {
		n = 10_000
	}
	root := b.TempDir()
	file, dir := filepath.Join(root, "journal.jsonl"), filepath.Join(root, "journal")
	f, err := journal.OpenFile(file)
	if err != nil {
		b.Fatal(err)
	}
	j, err := journal.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 200-len(`{"engine_run_id":"run","seq":1000000,"type":"unit","pad":""}`))
	for done := 0; done < n; {
		lines := make([]outbox.EventLine, min(1000, n-done))
		for i := range lines {
			seq := int64(done + i + 1)
			lines[i] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":"run","seq":%7d,"type":"unit","pad":"%s"}`, seq, pad)}
		}
		for _, sink := range []appendSink{f, j} {
			if err := sink.Append(context.Background(), "run", lines); err != nil {
				b.Fatal(err)
			}
		}
		done += len(lines)
	}
	f.Close()
	j.Close()

	ctx := context.Background()
	apply := func(c *consumer, segments bool) (time.Duration, Report) {
		t0 := time.Now()
		var rep Report
		var err error
		if segments {
			rep, err = c.in.ApplyJournal(ctx, dir, record)
		} else {
			rep, err = c.in.ApplyFile(ctx, file, record)
		}
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0), rep
	}
	var catchUp, atEnd [2]time.Duration
	for b.Loop() {
		for k, segments := range []bool{false, true} {
			b.StopTimer()
			c := newConsumer(b)
			b.StartTimer()
			d, rep := apply(c, segments)
			if rep.Applied != n {
				b.Fatalf("applied %d of %d", rep.Applied, n)
			}
			catchUp[k] += d
			d, rep = apply(c, segments)
			if rep.Applied != 0 {
				b.Fatalf("a caught-up call applied %d", rep.Applied)
			}
			atEnd[k] += d
		}
	}
	lines := float64(n) * float64(b.N)
	b.ReportMetric(lines/catchUp[0].Seconds(), "file-lines/s")
	b.ReportMetric(lines/catchUp[1].Seconds(), "journal-lines/s")
	b.ReportMetric(catchUp[0].Seconds()/catchUp[1].Seconds(), "ratio")
	b.ReportMetric(float64(atEnd[0].Microseconds())/float64(b.N), "file-at-end-µs")
	b.ReportMetric(float64(atEnd[1].Microseconds())/float64(b.N), "journal-at-end-µs")
}
