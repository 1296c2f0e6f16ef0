// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// The soak's journal: segments of 16 KiB, so that a few minutes make thousands of them, and a cap of
// 32, so that retention deletes as fast as the engine writes.
const (
	soakSegment = 16 << 10
	soakCap     = 32 * soakSegment
)

type soakSample struct {
	at         time.Duration
	disk       int64         // the journal's segments, in bytes
	start      time.Duration // an engine's start: store, journal, relay, Recover, the handshake
	scrape     time.Duration // Store.Totals and every open run, as a metrics scrape reads them
	bookPerKey float64       // the book's files over the ledger's keys
	rss        int64         // this process's resident set, in bytes
	segments   int64         // segments the journal ever began, by the last one's name
	keys       int64
}

// soakEngine is one start of the engine: its store, journal and relay running.
type soakEngine struct {
	s      *outbox.Store
	j      *journal.Journal
	run    string
	cancel context.CancelFunc
	done   chan error
}

func startSoakEngine(ctx context.Context, book, jdir, run string) (*soakEngine, error) {
	s, err := outbox.Open(ctx, book)
	if err != nil {
		return nil, err
	}
	j, err := journal.Open(jdir, journal.WithSegmentSize(soakSegment), journal.WithKeep(0), journal.WithMaxBytes(soakCap))
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	e := &soakEngine{s: s, j: j, run: run, done: make(chan error, 1)}
	relay, err := outbox.NewRelay(s, j, run, outbox.WithPollInterval(5*time.Millisecond))
	if err == nil {
		err = relay.Recover(ctx)
	}
	if err == nil {
		_, err = s.EnqueueEvent(ctx, run, journal.Handshake(run, nil))
	}
	if err != nil {
		return nil, errors.Join(err, j.Close(), s.Close())
	}
	var runCtx context.Context
	runCtx, e.cancel = context.WithCancel(ctx)
	go func() { e.done <- relay.Run(runCtx) }()
	return e, nil
}

func (e *soakEngine) stop() error {
	e.cancel()
	err := <-e.done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return errors.Join(err, e.j.Close(), e.s.Close())
}

// TestAYearInMiniatureKeepsTheJournalUnderItsCapAndStartsScrapesBookAndMemoryFlat runs an engine and
// a following consumer for OUTBOX_SOAK_SECONDS over thousands of tiny segments with retention and a
// cap, restarting the engine every window, and samples the journal's disk use (which must never pass
// the cap and one segment), the engine's start, a metrics scrape, the book's bytes per ledger key and
// the resident set: the last window's figures must stay within generous ratios of the first's.
func TestAYearInMiniatureKeepsTheJournalUnderItsCapAndStartsScrapesBookAndMemoryFlat(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("OUTBOX_SOAK_SECONDS"))
	if secs <= 0 {
		t.Skip("OUTBOX_SOAK_SECONDS is not set")
	}
	ctx := outboxtest.Patient(t)
	dir := t.TempDir()
	book, jdir, plat := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal"), filepath.Join(dir, "platform.db")
	if err := os.Mkdir(jdir, 0o755); err != nil {
		t.Fatal(err)
	}
	const reader = "platform"
	if err := journal.SetReader(jdir, reader, 0); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, plat, inbox.WithReaderName(reader), inbox.WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	followCtx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() {
		followed <- in.FollowJournal(followCtx, jdir, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq) VALUES (?, ?)`, ev.RunID, ev.Seq)
			return err
		})
	}()
	defer func() {
		stopFollow()
		if err := <-followed; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the consumer: %v", err)
		}
	}()

	window := time.Duration(secs) * time.Second / 20
	pad := strings.Repeat("y", 200)
	var samples []soakSample
	var enqueued int64
	began := time.Now()
	for w := 0; time.Since(began) < time.Duration(secs)*time.Second; w++ {
		t0 := time.Now()
		e, err := startSoakEngine(ctx, book, jdir, fmt.Sprintf("soak-%d", w))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Since(t0)
		enqueued++ // the handshake
		for n := 0; time.Since(t0) < window; n++ {
			builds := make([]outbox.EventBuilder, 16)
			for i := range builds {
				builds[i] = journal.Builder(e.run, "tick", map[string]any{"n": n, "pad": pad})
			}
			if _, err := e.s.EnqueueEvents(ctx, e.run, builds); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.s.EnqueueOnce(ctx, e.run, fmt.Sprintf("key-%d-%d", w, n), journal.Builder(e.run, "once", map[string]any{"n": n})); err != nil {
				t.Fatal(err)
			}
			enqueued += 17
			if n%20 == 0 {
				if d := soakDisk(t, jdir); d > soakCap+soakSegment {
					t.Fatalf("the journal holds %d bytes, over the cap %d and one segment", d, soakCap)
				}
				// The consumer follows: the engine waits while it is more than half the cap behind,
				// as a platform that keeps up would let it.
				for soakLag(t, jdir, reader) > soakCap/2 {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		t1 := time.Now()
		tot, err := e.s.Totals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range e.s.OpenRuns(ctx) {
			if err != nil {
				t.Fatal(err)
			}
		}
		scrape := time.Since(t1)
		if err := e.stop(); err != nil {
			t.Fatal(err)
		}
		smp := soakSample{at: time.Since(began), disk: soakDisk(t, jdir), start: start, scrape: scrape,
			rss: soakRSS(t), segments: soakSegments(t, jdir), keys: tot.LedgerKeys}
		smp.bookPerKey = float64(soakFiles(t, book)) / float64(max(tot.LedgerKeys, 1))
		if smp.disk > soakCap+soakSegment {
			t.Fatalf("the journal holds %d bytes, over the cap %d and one segment", smp.disk, soakCap)
		}
		samples = append(samples, smp)
		t.Logf("%6.0fs: journal %7d B, %5d segments begun, start %8v, scrape %8v, book %6.0f B/key (%d keys), RSS %4d MiB",
			smp.at.Seconds(), smp.disk, smp.segments, start.Round(time.Microsecond), scrape.Round(time.Microsecond),
			smp.bookPerKey, smp.keys, smp.rss>>20)
	}
	if len(samples) < 8 {
		t.Fatalf("only %d windows: give the soak more seconds", len(samples))
	}
	// The figures must be flat: the last quarter's median against the first quarter's (after the
	// first window, which creates everything), with ratios generous enough for a shared machine.
	q := len(samples) / 4
	first, last := samples[1:1+q], samples[len(samples)-q:]
	flat := func(what string, get func(soakSample) float64, ratio, floor float64) {
		a, b := median(first, get), median(last, get)
		if b > max(a*ratio, floor) {
			t.Errorf("%s grew from %.4g to %.4g (more than %.1f times)", what, a, b, ratio)
		}
	}
	flat("the engine's start (s)", func(s soakSample) float64 { return s.start.Seconds() }, 5, 0.05)
	flat("a scrape (s)", func(s soakSample) float64 { return s.scrape.Seconds() }, 5, 0.02)
	flat("the book per key (B)", func(s soakSample) float64 { return s.bookPerKey }, 1.5, 0)
	flat("the resident set (B)", func(s soakSample) float64 { return float64(s.rss) }, 2, 0)
	if n := samples[len(samples)-1].segments; n < 1000 {
		t.Logf("only %d segments were begun: a longer soak covers thousands", n)
	}
	t.Logf("%d windows, %d lines enqueued, %d segments begun", len(samples), enqueued, samples[len(samples)-1].segments)
}

func median(s []soakSample, get func(soakSample) float64) float64 {
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = get(x)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// soakDisk is the size of the journal's segments.
func soakDisk(t *testing.T, jdir string) int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(jdir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, name := range names {
		if st, err := os.Stat(name); err == nil {
			n += st.Size()
		}
	}
	return n
}

// soakSegments is how many segments the journal began: the last one's name over the segment size.
func soakSegments(t *testing.T, jdir string) int64 {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(jdir, "*.jsonl"))
	if len(names) == 0 {
		return 0
	}
	slices.Sort(names)
	base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(names[len(names)-1]), ".jsonl"), 10, 64)
	return base/soakSegment + 1
}

// soakLag is how many bytes of the journal the reader has not applied, by its reader file.
func soakLag(t *testing.T, jdir, reader string) int64 {
	t.Helper()
	rs, err := journal.Readers(jdir)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	names, _ := filepath.Glob(filepath.Join(jdir, "*.jsonl"))
	slices.Sort(names)
	if len(names) > 0 {
		last := names[len(names)-1]
		base, _ := strconv.ParseInt(strings.TrimSuffix(filepath.Base(last), ".jsonl"), 10, 64)
		if st, err := os.Stat(last); err == nil {
			end = base + st.Size()
		}
	}
	for _, r := range rs {
		if r.Name == reader {
			return end - r.Position
		}
	}
	return end
}

// soakFiles is the size of a SQLite database with its WAL.
func soakFiles(t *testing.T, path string) int64 {
	t.Helper()
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// soakRSS is this process's resident set, from /proc (0 where there is none).
func soakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(l, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(rest)), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
