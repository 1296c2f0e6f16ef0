// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

// An exporter given a stream serves its size and each registered reader's lag, and, once the
// trim's cap removed what a reader had not applied, the cap's mark and what it took from it.
func TestMetricsServesAStreamsReadersLagAndWhatTheCapTook(t *testing.T) {
	url, _, _, _ := streamConsumer(t) // the reader applied 1..3 of 5
	murl, _ := startMetricsWith(t, "--stream", "EVENTS", "--nats", url)
	m := scrape(t, murl)
	// The reader's name is the one its inbox derived from its file's name.
	reader := ""
	for k := range m {
		if r, ok := strings.CutPrefix(k, `outbox_stream_reader_lag_seqs{reader="inbox-consumer.db`); ok {
			reader = `{reader="inbox-consumer.db` + r
		}
	}
	want := map[string]float64{
		`outbox_stream_up{stream="EVENTS"}`:           1,
		`outbox_stream_messages{stream="EVENTS"}`:     5,
		`outbox_stream_last_seq{stream="EVENTS"}`:     5,
		`outbox_stream_capped_below{stream="EVENTS"}`: 0,
		`outbox_stream_reader_lag_seqs` + reader:      2,
		`outbox_stream_reader_capped_seqs` + reader:   0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("before the cap: %s = %v, %v; want %v", k, got, ok, v)
		}
	}
	if code, _, errOut := cli(t, "stream", "trim", "--nats", url, "--stream", "EVENTS", "--max-bytes", "1"); code != exitOK {
		t.Fatalf("stream trim: exit %d, %s", code, errOut)
	}
	m = scrape(t, murl)
	want = map[string]float64{
		`outbox_stream_messages{stream="EVENTS"}`:     0,
		`outbox_stream_bytes{stream="EVENTS"}`:        0,
		`outbox_stream_capped_below{stream="EVENTS"}`: 6,
		`outbox_stream_reader_lag_seqs` + reader:      2,
		`outbox_stream_reader_capped_seqs` + reader:   2,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("after the cap: %s = %v, %v; want %v", k, got, ok, v)
		}
	}
}

func TestMetricsRefusesAStreamWithoutAServerAndAServerWithoutAStream(t *testing.T) {
	for _, args := range [][]string{{"--stream", "EVENTS"}, {"--db", "x.db", "--nats", "nats://127.0.0.1:1"}} {
		code, _, errOut := cli(t, append([]string{"metrics"}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "--stream NAME") {
			t.Errorf("metrics %q: exit %d, %q: want a usage error naming --stream", args, code, errOut)
		}
	}
}
