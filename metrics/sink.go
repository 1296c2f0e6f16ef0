// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/outbox"
)

// SinkMetrics measures a relay's appends to its sink: it is the relay's outbox.SinkObserver and a
// prometheus.Collector of these series, none of them per run (a run is an engine's start: series per
// run would grow with every start):
//
//   - outbox_sink_append_seconds (histogram, label result: ok, error or refused): how long each
//     Append took; its _count by result is the rate of appends, failures (error, retried) and
//     refusals (refused, the run stops: see outbox.ErrSinkRefused).
//   - outbox_sink_batch_lines and outbox_sink_batch_bytes (histograms): the lines and bytes of each
//     batch the sink took.
//
// Every result's series exists from the start, at zero, so that a rate() of errors is 0 rather than
// absent before the first error. One SinkMetrics may serve several relays of one process.
type SinkMetrics struct {
	seconds *prometheus.HistogramVec
	lines   prometheus.Histogram
	bytes   prometheus.Histogram
}

var _ outbox.SinkObserver = (*SinkMetrics)(nil)

// The results an append is counted under.
const (
	resultOK      = "ok"
	resultError   = "error"
	resultRefused = "refused"
)

// NewSinkMetrics returns the sink's histograms, to register and to give the relay with
// outbox.WithSinkObserver; RelayOption does both in one call.
func NewSinkMetrics() *SinkMetrics {
	m := &SinkMetrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_sink_append_seconds",
			Help: "How long each append of a batch to the sink took, by result: ok, error (the relay retries) or refused (the sink refuses the run's lines: the run stops).",
			// From a page-cache write to a broker's round trip under load.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"result"}),
		lines: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_sink_batch_lines",
			Help:    "Lines in each batch the sink took.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8), // 1 .. 16384; the default batch is 256 lines
		}),
		bytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_sink_batch_bytes",
			Help:    "Bytes of lines in each batch the sink took (newlines not counted).",
			Buckets: prometheus.ExponentialBuckets(256, 4, 9), // 256 B .. 16 MiB; the default bound is 4 MiB
		}),
	}
	for _, r := range []string{resultOK, resultError, resultRefused} {
		m.seconds.WithLabelValues(r)
	}
	return m
}

// ObserveAppend records one append (outbox.SinkObserver).
func (m *SinkMetrics) ObserveAppend(a outbox.SinkAppend) {
	result := resultOK
	switch {
	case errors.Is(a.Err, outbox.ErrSinkRefused):
		result = resultRefused
	case a.Err != nil:
		result = resultError
	}
	m.seconds.WithLabelValues(result).Observe(a.Elapsed.Seconds())
	if a.Err == nil {
		m.lines.Observe(float64(a.Lines))
		m.bytes.Observe(float64(a.Bytes))
	}
}

// Describe implements prometheus.Collector.
func (m *SinkMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.seconds.Describe(ch)
	m.lines.Describe(ch)
	m.bytes.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *SinkMetrics) Collect(ch chan<- prometheus.Metric) {
	m.seconds.Collect(ch)
	m.lines.Collect(ch)
	m.bytes.Collect(ch)
}

// RelayOption is the one line that measures a relay's sink: it registers the sink's histograms on reg
// (or, when reg already has them, from another relay of the process, takes those) and returns the
// relay option that feeds them:
//
//	relay, err := outbox.NewRelay(store, sink, runID, metrics.RelayOption(reg))
//
// It panics when reg holds other series of these names, as MustRegister does.
func RelayOption(reg prometheus.Registerer) outbox.RelayOption {
	m := NewSinkMetrics()
	if err := reg.Register(m); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
		existing, ok := are.ExistingCollector.(*SinkMetrics)
		if !ok {
			panic(err)
		}
		m = existing
	}
	return outbox.WithSinkObserver(m)
}
