// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/outbox"
	"github.com/textmachine/outbox/outboxtest"
)

// RelayOption measures a relay's appends: how long each took by result, and the lines and bytes of
// each batch the sink took; a second relay of the process shares the histograms registered by the
// first instead of failing.
func TestRelayOptionMeasuresTheSinksAppendsByResultAndBatchSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openBook(t)
	reg := prometheus.NewPedanticRegistry()
	got := gather(t, reg)
	if len(got) != 0 {
		t.Fatalf("an empty registry: %v", got)
	}
	sink := outboxtest.NewSink()
	down := errors.New("sink down")
	sink.SetErr(down)
	enqueue(t, s, "a", 5)
	relay, err := outbox.NewRelay(s, sink, "a", RelayOption(reg), outbox.WithBatchSize(2), outbox.WithFlushAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); !errors.Is(err, down) {
		t.Fatalf("Flush of a sink that is down: %v", err)
	}
	sink.SetErr(nil)
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "b", 1)
	other, err := outbox.NewRelay(s, sink, "b", RelayOption(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sink.SetErr(fmt.Errorf("no: %w", outbox.ErrSinkRefused))
	enqueue(t, s, "b", 1)
	if err := other.Flush(ctx); !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush of a refusing sink: %v", err)
	}
	got = gather(t, reg)
	for k, want := range map[string]float64{
		"outbox_sink_append_seconds_count{result=ok}":      4, // 2+2+1 lines of a, 1 of b
		"outbox_sink_append_seconds_count{result=error}":   1,
		"outbox_sink_append_seconds_count{result=refused}": 1,
		"outbox_sink_batch_lines_count":                    4,
		"outbox_sink_batch_lines_sum":                      6,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if got["outbox_sink_batch_bytes_sum"] <= 0 {
		t.Errorf("no bytes measured: %v", got)
	}
}

// Every result's series is there from the start, at zero, so that a rate() of errors is 0 before the
// first error rather than absent.
func TestEveryResultOfTheSinkHasASeriesFromTheStart(t *testing.T) {
	t.Parallel()
	got := scrape(t, NewSinkMetrics())
	for _, r := range []string{"ok", "error", "refused"} {
		if v, ok := got["outbox_sink_append_seconds_count{result="+r+"}"]; !ok || v != 0 {
			t.Errorf("result %s: %v, %v", r, v, ok)
		}
	}
}
