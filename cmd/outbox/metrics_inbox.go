// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/outbox"
)

// The inbox's series are bounded by what needs attention, never by the runs seen: one figure for
// all runs, a series per quarantined run, a series per file or stream source (an inbox reads a few).
var (
	descInboxUp         = prometheus.NewDesc("outbox_inbox_up", "1 when the last read of the inbox succeeded, 0 when it failed.", nil, nil)
	descInboxRuns       = prometheus.NewDesc("outbox_inbox_runs", "Runs the inbox has applied lines of (one figure for the database, not a series per run).", nil, nil)
	descInboxQuarCount  = prometheus.NewDesc("outbox_inbox_quarantined_runs", "Runs quarantined: nothing more of them is applied until released.", nil, nil)
	descInboxQuarantine = prometheus.NewDesc("outbox_inbox_run_quarantined", "1 for each quarantined run, with why (gap, conflict or handler); no series for a healthy run.", []string{"run", "reason"}, nil)
	descInboxQuarPos    = prometheus.NewDesc("outbox_inbox_quarantined_run_position", "A quarantined run's high-water mark: the last seq it applied.", []string{"run"}, nil)
	descInboxBehind     = prometheus.NewDesc("outbox_inbox_source_behind_bytes", "Bytes of a followed journal file still to be read to its end; absent when it cannot be told.", []string{"source"}, nil)
	descInboxStreamPos  = prometheus.NewDesc("outbox_inbox_stream_position", "The last stream sequence a JetStream stream source applied (one series per stream and subject filter); absent while it reads the stream again from its start.", []string{"source"}, nil)
	inboxDescriptions   = []*prometheus.Desc{descInboxUp, descInboxRuns, descInboxQuarCount, descInboxQuarantine, descInboxQuarPos, descInboxBehind, descInboxStreamPos}
)

// inboxCollector reads a consumer's inbox at each scrape.
type inboxCollector struct {
	in     *inbox.Inbox
	path   string
	stderr io.Writer
}

func (c *inboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range inboxDescriptions {
		ch <- d
	}
}

// inboxFigures is what one scrape reads.
type inboxFigures struct {
	runs        int64
	quarantined []inbox.Quarantine
	positions   map[string]int64
	sources     []inboxSourceRow
}

func (c *inboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := readInboxFigures(ctx, c.in)
	if errors.Is(err, outbox.ErrBookOpened) {
		f, err = readInboxFigures(ctx, c.in)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if err != nil {
		// The scrape still answers, with outbox_inbox_up 0 saying the figures are missing.
		fmt.Fprintf(c.stderr, "outbox metrics: inbox %s: %s\n", quote(c.path), message(err))
		gauge(descInboxUp, 0)
		return
	}
	gauge(descInboxUp, 1)
	gauge(descInboxRuns, float64(f.runs))
	gauge(descInboxQuarCount, float64(len(f.quarantined)))
	for _, q := range f.quarantined {
		run := labelValue(q.RunID)
		gauge(descInboxQuarantine, 1, run, labelValue(q.Reason))
		gauge(descInboxQuarPos, float64(f.positions[q.RunID]), run)
	}
	for _, s := range f.sources {
		if s.BehindBytes != nil {
			gauge(descInboxBehind, float64(*s.BehindBytes), labelValue(s.Name))
		}
		// The stream's last sequence is the server's: a scrape reads the database only, and the
		// lag is the difference with the stream's own metrics.
		if s.Stream != nil && s.Stream.Seq != nil {
			gauge(descInboxStreamPos, float64(*s.Stream.Seq), labelValue(s.Name))
		}
	}
}

func readInboxFigures(ctx context.Context, in *inbox.Inbox) (inboxFigures, error) {
	var f inboxFigures
	var err error
	if f.runs, err = in.RunCount(ctx); err != nil {
		return f, err
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
	srcs, err := in.Sources(ctx)
	if err != nil {
		return f, err
	}
	for _, s := range srcs {
		if row := sourceRow(s); row.BehindBytes != nil || row.BehindError != "" || row.Stream != nil {
			f.sources = append(f.sources, row)
		}
	}
	return f, nil
}
