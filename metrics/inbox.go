// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/outbox"
)

// The inbox's series are bounded by what needs attention, never by the runs seen: one figure for all
// runs, the counts, a series per quarantined run, a series per file or stream source (an inbox reads
// a few).
var (
	descInboxUp          = prometheus.NewDesc("outbox_inbox_up", "1 when the last read of the inbox succeeded, 0 when it failed or the database does not exist yet.", nil, nil)
	descInboxRuns        = prometheus.NewDesc("outbox_inbox_runs", "Runs the inbox has applied lines of (one figure for the database, not a series per run).", nil, nil)
	descInboxApplied     = prometheus.NewDesc("outbox_inbox_lines_applied_total", "Lines the inbox applied (their handler ran and committed); kept in the database: it survives restarts and never goes down.", nil, nil)
	descInboxDuplicates  = prometheus.NewDesc("outbox_inbox_lines_duplicates_total", "Lines re-delivered with the bytes already applied, not applied again; kept in the database.", nil, nil)
	descInboxStale       = prometheus.NewDesc("outbox_inbox_lines_stale_total", "Lines older than the digest window, not applied; kept in the database.", nil, nil)
	descInboxQuarantined = prometheus.NewDesc("outbox_inbox_lines_quarantined_total", "Lines not applied because their run is quarantined; kept in the database.", nil, nil)
	descInboxQuarCount   = prometheus.NewDesc("outbox_inbox_quarantined_runs", "Runs quarantined: nothing more of them is applied until released.", nil, nil)
	descInboxQuarantine  = prometheus.NewDesc("outbox_inbox_run_quarantined", "1 for each quarantined run, with why (gap, conflict or handler); no series for a healthy run.", []string{"run", "reason"}, nil)
	descInboxQuarPos     = prometheus.NewDesc("outbox_inbox_quarantined_run_position", "A quarantined run's high-water mark: the last seq it applied.", []string{"run"}, nil)
	descInboxBehind      = prometheus.NewDesc("outbox_inbox_source_behind_bytes", "Bytes of a followed journal file still to be read to its end; absent when it cannot be told.", []string{"source"}, nil)
	descInboxStreamPos   = prometheus.NewDesc("outbox_inbox_stream_position", "The last stream sequence a JetStream stream source applied (one series per stream and subject filter); absent while it reads the stream again from its start.", []string{"source"}, nil)
	inboxDescriptions    = []*prometheus.Desc{descInboxUp, descInboxRuns, descInboxApplied, descInboxDuplicates, descInboxStale,
		descInboxQuarantined, descInboxQuarCount, descInboxQuarantine, descInboxQuarPos, descInboxBehind, descInboxStreamPos}
)

type inboxCollector struct {
	cfg  config
	open func(ctx context.Context) (*inbox.Inbox, error)

	mu sync.Mutex
	in *inbox.Inbox
}

// NewInboxCollector returns a collector of a consumer's inbox, read from in at each scrape: the
// counts of lines applied, duplicate, stale and quarantined (counters), the runs, each quarantined
// run, and per file source the bytes still to be read. in may be the consumer's own Inbox or one
// opened with inbox.OpenReadOnly beside it; the caller keeps it open while the collector is
// registered.
func NewInboxCollector(in *inbox.Inbox, opts ...Option) prometheus.Collector {
	if in == nil {
		panic("metrics: NewInboxCollector of a nil inbox")
	}
	return &inboxCollector{cfg: newConfig(opts), in: in}
}

// NewOpeningInboxCollector is NewInboxCollector for a database that may not hold an inbox yet: at
// each scrape until open succeeds it answers outbox_inbox_up 0, as NewOpeningCollector does.
func NewOpeningInboxCollector(open func(ctx context.Context) (*inbox.Inbox, error), opts ...Option) prometheus.Collector {
	if open == nil {
		panic("metrics: NewOpeningInboxCollector of a nil function")
	}
	return &inboxCollector{cfg: newConfig(opts), open: open}
}

func (c *inboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range inboxDescriptions {
		ch <- d
	}
}

// inboxFigures is what one scrape reads.
type inboxFigures struct {
	runs        int64
	totals      *inbox.Totals
	quarantined []inbox.Quarantine
	positions   map[string]int64
	sources     []inbox.Source
}

func (c *inboxCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if c.in == nil {
		in, err := c.open(ctx)
		if err != nil {
			c.cfg.onError(err)
			gauge(descInboxUp, 0)
			return
		}
		c.in = in
	}
	f, err := readInbox(ctx, c.in)
	if errors.Is(err, outbox.ErrBookOpened) {
		// A consumer opened the database during the read: the same read again sees it.
		f, err = readInbox(ctx, c.in)
	}
	if err != nil {
		c.cfg.onError(err)
		gauge(descInboxUp, 0)
		return
	}
	gauge(descInboxUp, 1)
	gauge(descInboxRuns, float64(f.runs))
	if t := f.totals; t != nil {
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
		}
		counter(descInboxApplied, t.Applied)
		counter(descInboxDuplicates, t.Duplicates)
		counter(descInboxStale, t.Stale)
		counter(descInboxQuarantined, t.Quarantined)
	}
	gauge(descInboxQuarCount, float64(len(f.quarantined)))
	for _, q := range f.quarantined {
		run := labelValue(q.RunID)
		gauge(descInboxQuarantine, 1, run, labelValue(q.Reason))
		gauge(descInboxQuarPos, float64(f.positions[q.RunID]), run)
	}
	for _, s := range f.sources {
		if behind, ok := fileBehind(s); ok {
			gauge(descInboxBehind, float64(behind), labelValue(s.Name))
		}
		// The stream's own last sequence is the server's to export: the lag is the difference.
		if c.cfg.streamSeq != nil && s.Position != nil {
			if seq, ok := c.cfg.streamSeq(s); ok {
				gauge(descInboxStreamPos, float64(seq), labelValue(s.Name))
			}
		}
	}
}

func readInbox(ctx context.Context, in *inbox.Inbox) (inboxFigures, error) {
	var f inboxFigures
	var err error
	if f.runs, err = in.RunCount(ctx); err != nil {
		return f, err
	}
	switch t, err := in.Totals(ctx); {
	case errors.Is(err, inbox.ErrNoTotals):
		// A database an earlier release keeps beside this reader: no counts to give yet.
	case err != nil:
		return f, err
	default:
		f.totals = &t
	}
	if f.quarantined, err = in.Quarantined(ctx); err != nil {
		return f, err
	}
	f.positions = make(map[string]int64, len(f.quarantined))
	for _, q := range f.quarantined {
		if f.positions[q.RunID], err = in.Position(ctx, q.RunID); err != nil {
			return f, err
		}
	}
	if f.sources, err = in.Sources(ctx); err != nil {
		return f, err
	}
	return f, nil
}

// fileBehind is how many bytes a file source has still to read to its file's end, when that can be
// told: after a rewind, the file its position named read again from its start, or the whole file.
func fileBehind(s inbox.Source) (int64, bool) {
	path, ok := strings.CutPrefix(s.Name, inboxseam.FileSourcePrefix)
	if !ok {
		return 0, false
	}
	if s.Position == nil && s.RewoundFrom != nil {
		if p, err := inbox.ParseFilePosition(s.RewoundFrom); err == nil {
			p.Offset = 0
			if behind, found, err := inbox.FileBehind(path, p); err == nil && found {
				return behind, true
			}
		}
	}
	if s.Position == nil {
		st, err := os.Stat(path)
		if err != nil {
			return 0, false
		}
		return st.Size(), true
	}
	p, err := inbox.ParseFilePosition(s.Position)
	if err != nil {
		return 0, false
	}
	behind, found, err := inbox.FileBehind(path, p)
	if err != nil || !found {
		return 0, false
	}
	return behind, true
}
