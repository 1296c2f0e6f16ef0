// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/outbox"
)

// The book's series: the book-wide figures, and a run's own while it has lines pending or is stopped,
// and for the grace period after (see the package documentation), never for every run the book has
// seen.
var (
	runLabels          = []string{"run"}
	descUp             = prometheus.NewDesc("outbox_up", "1 when the last read of the book succeeded, 0 when it failed or the book does not exist yet.", nil, nil)
	descRuns           = prometheus.NewDesc("outbox_runs", "Runs the book holds rows of, buffered lines or once keys in the ledger (one figure for the book, not a series per run).", nil, nil)
	descStoppedRuns    = prometheus.NewDesc("outbox_stopped_runs", "Runs whose projection a relay stopped because the sink refused their lines (see outbox stats).", nil, nil)
	descPendingAll     = prometheus.NewDesc("outbox_pending_lines", "Lines pending: not yet projected, of all runs together.", nil, nil)
	descStoredAll      = prometheus.NewDesc("outbox_stored_lines", "Lines still stored in the database, of all runs together.", nil, nil)
	descOldestAgeAll   = prometheus.NewDesc("outbox_oldest_pending_age_seconds", "Age of the oldest line not yet projected, of any run; absent when there is none or its time is unknown.", nil, nil)
	descLastSeq        = prometheus.NewDesc("outbox_run_last_seq", "The highest seq the run was ever given; for a run with lines pending or stopped, and for the grace period after.", runLabels, nil)
	descProjected      = prometheus.NewDesc("outbox_run_projected_seq", "Every line of the run up to this seq is in the journal; for a run with lines pending or stopped, and for the grace period after.", runLabels, nil)
	descPending        = prometheus.NewDesc("outbox_run_pending_lines", "Lines of the run pending (not yet projected); for a run with lines pending or stopped, and for the grace period after (0 then).", runLabels, nil)
	descOldestAge      = prometheus.NewDesc("outbox_run_oldest_pending_age_seconds", "Age of the run's oldest line not yet projected; absent when there is none or its time is unknown.", runLabels, nil)
	descStopped        = prometheus.NewDesc("outbox_run_stopped", "1 for each run whose projection a relay stopped because the sink refused its lines (see outbox stats); no series for a run that is not stopped, and the series goes once the run projects again.", runLabels, nil)
	descStored         = prometheus.NewDesc("outbox_run_stored_lines", "Lines of the run still stored in the database; for a run with lines pending or stopped, and for the grace period after.", runLabels, nil)
	descEnqueuedTotal  = prometheus.NewDesc("outbox_lines_enqueued_total", "Lines ever enqueued to the book, of all runs together: it never goes down, across restarts and forgetting.", nil, nil)
	descProjectedTotal = prometheus.NewDesc("outbox_lines_projected_total", "Lines ever projected to the journal, of all runs together: it never goes down, across restarts and forgetting.", nil, nil)
	descLedger         = prometheus.NewDesc("outbox_ledger_keys", "Once keys in the announce-once ledger.", nil, nil)
	descDBBytes        = prometheus.NewDesc("outbox_database_bytes", "Size of the database file.", nil, nil)
	descWALBytes       = prometheus.NewDesc("outbox_wal_bytes", "Size of the database's WAL file (0 when there is none).", nil, nil)
	bookDescriptions   = []*prometheus.Desc{descUp, descRuns, descStoppedRuns, descPendingAll, descStoredAll, descOldestAgeAll,
		descLastSeq, descProjected, descPending, descOldestAge, descStopped, descStored, descEnqueuedTotal, descProjectedTotal,
		descLedger, descDBBytes, descWALBytes}
)

// bookCollector reads the book at each scrape. It remembers, for the grace period, when it last saw
// each run with lines pending: that, and not a figure, is all it keeps between scrapes.
type bookCollector struct {
	cfg  config
	open func(ctx context.Context) (*outbox.Store, error)

	mu     sync.Mutex // one scrape at a time: the runs seen are updated by each
	s      *outbox.Store
	active map[string]time.Time // run → the last scrape that saw it with lines pending or stopped
}

// NewCollector returns a collector of the book's figures, read from s at each scrape (see the
// package documentation for the series). s may be a Store opened with Open (an engine's) or with
// OpenReadOnly (an exporter beside it); the caller keeps it open while the collector is registered.
func NewCollector(s *outbox.Store, opts ...Option) prometheus.Collector {
	if s == nil {
		panic("metrics: NewCollector of a nil store")
	}
	return &bookCollector{cfg: newConfig(opts), s: s, active: map[string]time.Time{}}
}

// NewOpeningCollector is NewCollector for a book that may not exist yet, as for an exporter started
// before the engine: at each scrape until open succeeds it answers outbox_up 0 (and tells the error
// handler why), then collects from the store open returned, which the caller closes after
// unregistering the collector. open is called at most once at a time.
func NewOpeningCollector(open func(ctx context.Context) (*outbox.Store, error), opts ...Option) prometheus.Collector {
	if open == nil {
		panic("metrics: NewOpeningCollector of a nil function")
	}
	return &bookCollector{cfg: newConfig(opts), open: open, active: map[string]time.Time{}}
}

func (c *bookCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range bookDescriptions {
		ch <- d
	}
}

func (c *bookCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	if c.s == nil {
		s, err := c.open(ctx)
		if err != nil {
			c.cfg.onError(err)
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
			return
		}
		c.s = s
	}
	m, err := c.read(ctx)
	if errors.Is(err, outbox.ErrBookOpened) {
		// An engine opened the book during the read: the same read again sees it.
		m, err = c.read(ctx)
	}
	if err != nil {
		c.cfg.onError(err)
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descUp, 1)
	var oldest *float64
	for _, r := range m.runs {
		run := labelValue(r.RunID)
		gauge(descLastSeq, float64(r.LastSeq), run)
		gauge(descProjected, float64(r.Projected), run)
		gauge(descPending, float64(r.Pending), run)
		gauge(descStored, float64(r.Lines), run)
		if r.StoppedSeq != 0 {
			gauge(descStopped, 1, run)
		}
		if !r.OldestPending.IsZero() {
			age := max(m.now.Sub(r.OldestPending).Seconds(), 0)
			gauge(descOldestAge, age, run)
			if oldest == nil || age > *oldest {
				oldest = &age
			}
		}
	}
	t := m.totals
	gauge(descRuns, float64(t.RunsWithRows))
	gauge(descStoppedRuns, float64(t.StoppedRuns))
	gauge(descPendingAll, float64(t.Pending))
	gauge(descStoredAll, float64(t.Lines))
	if oldest != nil {
		gauge(descOldestAgeAll, *oldest)
	}
	ch <- prometheus.MustNewConstMetric(descEnqueuedTotal, prometheus.CounterValue, float64(t.EnqueuedTotal))
	ch <- prometheus.MustNewConstMetric(descProjectedTotal, prometheus.CounterValue, float64(t.ProjectedTotal))
	gauge(descLedger, float64(t.LedgerKeys))
	gauge(descDBBytes, float64(fileSize(c.s.Path())))
	gauge(descWALBytes, float64(fileSize(c.s.Path()+"-wal")))
}

// bookFigures is what one scrape reads of a book.
type bookFigures struct {
	now    time.Time
	totals outbox.BookTotals
	runs   []outbox.RunStats
}

// read reads the totals (a row per run), the runs with lines pending from the index of the runs that
// can need work, and each run still in its grace period that has left that index (a key look-up
// each): a scrape costs a row per run, however many lines and keys the book holds.
func (c *bookCollector) read(ctx context.Context) (bookFigures, error) {
	m := bookFigures{now: c.cfg.now()}
	var err error
	if m.totals, err = c.s.Totals(ctx); err != nil {
		return m, err
	}
	named := map[string]bool{}
	for r, err := range c.s.OpenRuns(ctx) {
		if err != nil {
			return m, err
		}
		if r.Pending > 0 || r.StoppedSeq != 0 {
			named[r.RunID] = true
			m.runs = append(m.runs, r)
		} else if c.inGrace(r.RunID, m.now) {
			// Projected, its rows not yet forgotten.
			named[r.RunID] = true
			m.runs = append(m.runs, r)
		}
	}
	for id := range c.active {
		if named[id] || !c.inGrace(id, m.now) {
			continue
		}
		r, err := c.s.Run(ctx, id)
		if err != nil {
			return m, err
		}
		m.runs = append(m.runs, r)
	}
	// Only a read that succeeded moves the runs' times: a failed scrape forgets nothing.
	for _, r := range m.runs {
		if r.Pending > 0 || r.StoppedSeq != 0 {
			c.active[r.RunID] = m.now
		}
	}
	for id, at := range c.active {
		if m.now.Sub(at) >= c.cfg.grace {
			delete(c.active, id)
		}
	}
	return m, nil
}

// inGrace reports whether runID was seen with lines pending within the grace period.
func (c *bookCollector) inGrace(runID string, now time.Time) bool {
	at, ok := c.active[runID]
	return ok && now.Sub(at) < c.cfg.grace
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// labelValue is a run id (or a source's name) as a label value, which must be UTF-8: an id that is
// not is given quoted and escaped as Go's %q does, as the outbox command prints it, so that two such
// ids stay two series.
func labelValue(id string) string {
	if utf8.ValidString(id) {
		return id
	}
	return strconv.Quote(id)
}
