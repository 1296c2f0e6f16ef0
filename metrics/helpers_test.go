// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// scrape gathers c through a pedantic registry (which checks what Collect gives against what
// Describe says) and returns every sample as "name{label=value,...}" → value; a histogram gives its
// _count and _sum.
func scrape(t testing.TB, cs ...prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	return gather(t, reg)
}

func gather(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName() + labels(m)
			switch {
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				out[mf.GetName()+"_count"+labels(m)] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+labels(m)] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(ls)
	return "{" + strings.Join(ls, ",") + "}"
}

// runsNamed lists the runs that have an outbox_run_pending_lines series in a scrape.
func runsNamed(samples map[string]float64) map[string]bool {
	out := map[string]bool{}
	for k := range samples {
		if run, ok := strings.CutPrefix(k, "outbox_run_pending_lines{run="); ok {
			out[strings.TrimSuffix(run, "}")] = true
		}
	}
	return out
}

func openBook(t testing.TB) (*outbox.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func enqueue(t testing.TB, s *outbox.Store, run string, n int) {
	t.Helper()
	for range n {
		if _, err := s.EnqueueEvent(context.Background(), run, journal.Builder(run, "tick", n)); err != nil {
			t.Fatal(err)
		}
	}
}

func newRegistry(t testing.TB, cs ...prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}
