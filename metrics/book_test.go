// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
	"github.com/textmachine/outbox/outboxtest"
)

// The book's counters are sums of figures the book keeps for its life: after the lines are
// projected and forgotten, and after the engine and the collector start again, they have not gone
// down.
func TestTheBooksCountersNeverGoDownAcrossForgettingAndARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openBook(t)
	enqueue(t, s, "a", 7)
	enqueue(t, s, "b", 3)
	got := scrape(t, NewCollector(s))
	if got["outbox_up"] != 1 || got["outbox_lines_enqueued_total"] != 10 || got["outbox_lines_projected_total"] != 0 || got["outbox_pending_lines"] != 10 {
		t.Fatalf("before projecting: %v", got)
	}
	sink := outboxtest.NewSink()
	outboxtest.Flush(t, s, sink, "a")
	outboxtest.Flush(t, s, sink, "b")
	got = scrape(t, NewCollector(s))
	if got["outbox_lines_enqueued_total"] != 10 || got["outbox_lines_projected_total"] != 10 || got["outbox_stored_lines"] != 0 {
		t.Fatalf("after projecting and forgetting: %v", got)
	}
	s.Close()
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	enqueue(t, s, "c", 2)
	got = scrape(t, NewCollector(s))
	if got["outbox_lines_enqueued_total"] != 12 || got["outbox_lines_projected_total"] != 10 {
		t.Fatalf("after a restart: %v", got)
	}
}

// clock is a collector's time, moved by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A run whose pending lines are all projected (and its rows forgotten) between two scrapes keeps
// its series, at 0 pending, for the grace period after the last scrape that saw it with lines
// pending; then they go, so that the series stay bounded by the runs recently active.
func TestARunKeepsItsSeriesForTheGracePeriodAfterItsLastPendingLine(t *testing.T) {
	t.Parallel()
	s, _ := openBook(t)
	clk := &clock{now: time.Now()}
	c := NewCollector(s, WithGrace(time.Minute)).(*bookCollector)
	c.cfg.now = clk.Now
	enqueue(t, s, "a", 3)
	if got := scrape(t, c); got["outbox_run_pending_lines{run=a}"] != 3 {
		t.Fatalf("with lines pending: %v", got)
	}
	outboxtest.Flush(t, s, outboxtest.NewSink(), "a")
	clk.add(59 * time.Second)
	got := scrape(t, c)
	if v, ok := got["outbox_run_pending_lines{run=a}"]; !ok || v != 0 || got["outbox_run_projected_seq{run=a}"] != 3 ||
		got["outbox_run_last_seq{run=a}"] != 3 || got["outbox_run_stored_lines{run=a}"] != 0 {
		t.Fatalf("within the grace period after its last pending line: %v", got)
	}
	clk.add(time.Second)
	if got := scrape(t, c); runsNamed(got)["a"] {
		t.Fatalf("after the grace period the run is still named: %v", got)
	}
	// Lines pending again: named again, and the grace period starts again from there.
	enqueue(t, s, "a", 1)
	if got := scrape(t, c); got["outbox_run_pending_lines{run=a}"] != 1 || got["outbox_run_last_seq{run=a}"] != 4 {
		t.Fatalf("with a line pending again: %v", got)
	}
}

// Ten scrapes of a busy engine, whose runs' pending lines come and go between them: a run's series,
// once there, is there at every later scrape.
func TestTenScrapesOfABusyEngineNeverSeeARunsSeriesVanishAndComeBack(t *testing.T) {
	t.Parallel()
	s, _ := openBook(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	sink := outboxtest.NewSink()
	for i := range 5 {
		run := fmt.Sprintf("run%d", i)
		r, err := outbox.NewRelay(s, sink, run, outbox.WithPollInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() { defer wg.Done(); r.Run(ctx) }()
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for range 5 {
					if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "tick", 1)); err != nil && ctx.Err() == nil {
						t.Error(err)
						return
					}
				}
				// Bursts with pauses, so that the relay drains the run between scrapes.
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	}
	reg := newRegistry(t, NewCollector(s))
	seen := map[string]bool{}
	var counts []int
	for i := range 10 {
		named := runsNamed(gather(t, reg))
		for run := range seen {
			if !named[run] {
				t.Errorf("scrape %d: run %s's series vanished (runs named: %v)", i+1, run, named)
			}
		}
		for run := range named {
			seen[run] = true
		}
		counts = append(counts, len(named))
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("series per scrape: %v", counts)
}

// A scrape whose read fails answers outbox_up 0 and nothing else of the book, and tells the error
// handler why; the collector logs nothing itself.
func TestAScrapeWhoseReadFailsAnswersUpZero(t *testing.T) {
	t.Parallel()
	s, _ := openBook(t)
	var heard []error
	c := NewCollector(s, WithErrorHandler(func(err error) { heard = append(heard, err) }))
	s.Close()
	got := scrape(t, c)
	if len(got) != 1 || got["outbox_up"] != 0 {
		t.Fatalf("a scrape of a closed store: %v", got)
	}
	if len(heard) != 1 || !errors.Is(heard[0], outbox.ErrClosed) {
		t.Fatalf("the error handler heard %v", heard)
	}
}

// A collector of a book that does not exist yet answers outbox_up 0 until the book exists, then
// reads it: an exporter started before its engine serves instead of failing.
func TestAnOpeningCollectorAnswersUpZeroUntilTheBookExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "book.db")
	var ro *outbox.Store
	defer func() {
		if ro != nil {
			ro.Close()
		}
	}()
	c := NewOpeningCollector(func(ctx context.Context) (*outbox.Store, error) {
		if _, err := os.Stat(path); err != nil {
			return nil, err
		}
		var err error
		ro, err = outbox.OpenReadOnly(ctx, path)
		return ro, err
	})
	reg := newRegistry(t, c)
	for range 2 {
		if got := gather(t, reg); len(got) != 1 || got["outbox_up"] != 0 {
			t.Fatalf("before the book exists: %v", got)
		}
	}
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	enqueue(t, s, "a", 2)
	if got := gather(t, reg); got["outbox_up"] != 1 || got["outbox_lines_enqueued_total"] != 2 {
		t.Fatalf("once the book exists: %v", got)
	}
}
