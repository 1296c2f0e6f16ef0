// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// StreamFigures is what one scrape of a JetStream stream reads: its size and last sequence, the
// mark of its trim's hard cap, and its registered readers. jetstream.Status gives each of them;
// this module does not depend on NATS, so the caller copies them over (see NewStreamCollector).
type StreamFigures struct {
	Bytes, Msgs uint64
	LastSeq     uint64
	// CappedBelow is the stream sequence below which the trim's hard cap removed the lines, applied
	// or not (0: it never acted).
	CappedBelow uint64
	Readers     []StreamReaderFigures
}

// StreamReaderFigures is one registered reader of a stream.
type StreamReaderFigures struct {
	Name string
	// Lag is the stream's last sequence less the reader's registered one (jetstream.ReaderLag.Lag).
	Lag uint64
	// CapTook is how many stream sequences past the reader's position the cap removed before it
	// applied them (jetstream.ReaderLag.CapTook): the reader stops with a retention gap.
	CapTook uint64
}

// A stream's series carry its name as the constant label "stream", so that one registry holds
// the collectors of several streams; a reader's add the label "reader", which a deployment names.
var streamLabels = []string{"reader"}

type streamCollector struct {
	cfg  config
	read func(ctx context.Context) (StreamFigures, error)

	up, bytes, msgs, lastSeq, capped, lag, capTook *prometheus.Desc

	mu sync.Mutex
}

// NewStreamCollector returns a collector of the JetStream stream named stream, read with read at
// each scrape (under the collector's timeout): the stream's bytes, messages and last sequence, the
// mark of its trim's hard cap, and per registered reader its lag and what the cap removed before
// it applied it. The `outbox metrics --stream` exporter serves it; in a program:
//
//	metrics.NewStreamCollector("EVENTS", func(ctx context.Context) (metrics.StreamFigures, error) {
//		st, err := jetstream.Status(ctx, js, "EVENTS")
//		f := metrics.StreamFigures{Bytes: st.Bytes, Msgs: st.Msgs, LastSeq: st.LastSeq, CappedBelow: st.CappedBelow}
//		for _, r := range st.Readers {
//			f.Readers = append(f.Readers, metrics.StreamReaderFigures{Name: r.Name, Lag: r.Lag, CapTook: r.CapTook})
//		}
//		return f, err
//	})
//
// A read that fails answers outbox_stream_up 0 and nothing else of the stream.
func NewStreamCollector(stream string, read func(ctx context.Context) (StreamFigures, error), opts ...Option) prometheus.Collector {
	if stream == "" || read == nil {
		panic("metrics: NewStreamCollector needs a stream's name and a function that reads it")
	}
	l := prometheus.Labels{"stream": labelValue(stream)}
	return &streamCollector{cfg: newConfig(opts), read: read,
		up:      prometheus.NewDesc("outbox_stream_up", "1 when the last read of the stream and its readers succeeded, 0 when it failed.", nil, l),
		bytes:   prometheus.NewDesc("outbox_stream_bytes", "Bytes the stream holds: what its trim's cap (--max-bytes) bounds.", nil, l),
		msgs:    prometheus.NewDesc("outbox_stream_messages", "Messages the stream holds.", nil, l),
		lastSeq: prometheus.NewDesc("outbox_stream_last_seq", "The stream's last sequence.", nil, l),
		capped:  prometheus.NewDesc("outbox_stream_capped_below", "The stream sequence below which the trim's hard cap removed lines whether the readers had applied them or not; 0 when it never acted.", nil, l),
		lag:     prometheus.NewDesc("outbox_stream_reader_lag_seqs", "The stream's last sequence less a registered reader's: at most the messages it has still to apply.", streamLabels, l),
		capTook: prometheus.NewDesc("outbox_stream_reader_capped_seqs", "Stream sequences after a registered reader's position that the trim's cap removed before it applied them; above 0 the reader stops with a retention gap.", streamLabels, l),
	}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.bytes, c.msgs, c.lastSeq, c.capped, c.lag, c.capTook} {
		ch <- d
	}
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	f, err := c.read(ctx)
	if err != nil {
		c.cfg.onError(err)
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	gauge(c.bytes, f.Bytes)
	gauge(c.msgs, f.Msgs)
	gauge(c.lastSeq, f.LastSeq)
	gauge(c.capped, f.CappedBelow)
	seen := map[string]bool{}
	for _, r := range f.Readers {
		name := labelValue(r.Name)
		if seen[name] {
			continue // two names that clean to one label: the first keeps the series
		}
		seen[name] = true
		gauge(c.lag, r.Lag, name)
		gauge(c.capTook, r.CapTook, name)
	}
}
