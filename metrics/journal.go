// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/journal"
)

// The journal's series are bounded by its readers, which a deployment names, never by its segments.
var (
	descJournalUp          = prometheus.NewDesc("outbox_journal_up", "1 when the last read of the journal directory succeeded, 0 when it failed or the directory does not exist yet.", nil, nil)
	descJournalBytes       = prometheus.NewDesc("outbox_journal_bytes", "Bytes the journal's segments hold: from the first retained byte to the journal's end.", nil, nil)
	descJournalSegments    = prometheus.NewDesc("outbox_journal_segments", "Segment files the journal holds.", nil, nil)
	descJournalLagBytes    = prometheus.NewDesc("outbox_journal_reader_lag_bytes", "Bytes a registered reader has not read yet, from its registered position to the journal's end; 0 for a position past the end.", []string{"reader"}, nil)
	descJournalLagSegments = prometheus.NewDesc("outbox_journal_reader_lag_segments", "Segments holding bytes a registered reader has not read yet.", []string{"reader"}, nil)
	descJournalDeleted     = prometheus.NewDesc("outbox_journal_segments_deleted_total", "Segments retention deleted; kept in the journal's directory: it survives restarts and never goes down.", nil, nil)
	descJournalUnderCap    = prometheus.NewDesc("outbox_journal_segments_deleted_under_cap_total", "Of the segments retention deleted, those deleted under the size cap while a reader had not read them; kept in the journal's directory.", nil, nil)
	journalDescriptions    = []*prometheus.Desc{descJournalUp, descJournalBytes, descJournalSegments, descJournalLagBytes,
		descJournalLagSegments, descJournalDeleted, descJournalUnderCap}
)

type journalCollector struct {
	cfg config
	dir string

	mu sync.Mutex
}

// NewJournalCollector returns a collector of the segmented journal in dir, read with journal.Status
// at each scrape, without the directory's lock: beside the process appending to it, as a sidecar
// or in that process. It reports the journal's bytes and segments, each registered reader's lag,
// and the segments retention deleted (counters the journal keeps in its directory). A directory
// that does not exist yet answers outbox_journal_up 0 until the journal creates it, as
// NewOpeningCollector does for a book.
func NewJournalCollector(dir string, opts ...Option) prometheus.Collector {
	if dir == "" {
		panic("metrics: NewJournalCollector of an empty directory")
	}
	return &journalCollector{cfg: newConfig(opts), dir: dir}
}

func (c *journalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range journalDescriptions {
		ch <- d
	}
}

func (c *journalCollector) Collect(ch chan<- prometheus.Metric) {
	// One scrape at a time, as the other collectors: concurrent scrapes would each list the directory.
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st, err := journal.Status(ctx, c.dir)
	if err != nil {
		c.cfg.onError(err)
		gauge(descJournalUp, 0)
		return
	}
	gauge(descJournalUp, 1)
	gauge(descJournalBytes, float64(st.Bytes))
	gauge(descJournalSegments, float64(st.Segments))
	for _, r := range st.Readers {
		name := labelValue(r.Name)
		gauge(descJournalLagBytes, float64(r.LagBytes), name)
		gauge(descJournalLagSegments, float64(r.LagSegments), name)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(descJournalDeleted, st.Retained.DeletedSegments)
	counter(descJournalUnderCap, st.Retained.DeletedUnderCap)
}
