// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/metrics"
	"github.com/textmachine/outbox/outbox"
)

// An engine registers the book's collector on its own registry (served with promhttp.HandlerFor), and
// measures its relay's sink with one option.
func ExampleNewCollector() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "engine")
	defer os.RemoveAll(dir)
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(s))
	sink, err := journal.Open(filepath.Join(dir, "journal"))
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	relay, err := outbox.NewRelay(s, sink, "run-1", metrics.RelayOption(reg))
	if err != nil {
		log.Fatal(err)
	}

	for range 3 {
		if _, err := s.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "order_placed", map[string]int{"cents": 250})); err != nil {
			log.Fatal(err)
		}
	}
	if err := relay.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	n, _ := testutil.GatherAndCount(reg, "outbox_lines_projected_total", "outbox_sink_batch_lines")
	fmt.Println(n, "series")
	// Output: 2 series
}

// A platform registers its inbox's collector: the counts of lines applied, duplicate, stale and
// quarantined are counters its database keeps.
func ExampleNewInboxCollector() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "platform")
	defer os.RemoveAll(dir)
	in, err := inbox.Open(ctx, filepath.Join(dir, "platform.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewInboxCollector(in))

	lines := [][]byte{
		[]byte(`{"engine_run_id":"run-1","seq":1,"type":"order_placed","data":{}}`),
		[]byte(`{"engine_run_id":"run-1","seq":1,"type":"order_placed","data":{}}`),
	}
	if _, err := in.Apply(ctx, lines, inbox.Handler(func(context.Context, *sql.Tx, inbox.Event) error { return nil })); err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"outbox_inbox_lines_applied_total", "outbox_inbox_lines_duplicates_total"} {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				fmt.Println(name, mf.GetMetric()[0].GetCounter().GetValue())
			}
		}
	}
	// Output:
	// outbox_inbox_lines_applied_total 1
	// outbox_inbox_lines_duplicates_total 1
}

// The sink's histograms are the engine's own, measured by the relay: RelayOption registers them and
// feeds them in one option, for as many relays as the process runs.
func ExampleRelayOption() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "engine")
	defer os.RemoveAll(dir)
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	j, err := journal.Open(filepath.Join(dir, "journal"))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	reg := prometheus.NewRegistry()
	relay, err := outbox.NewRelay(s, j, "run-1", metrics.RelayOption(reg), outbox.WithBatchSize(2))
	if err != nil {
		log.Fatal(err)
	}
	for range 5 {
		if _, err := s.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "tick", 1)); err != nil {
			log.Fatal(err)
		}
	}
	if err := relay.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "outbox_sink_batch_lines" {
			h := mf.GetMetric()[0].GetHistogram()
			fmt.Println(h.GetSampleCount(), "batches,", h.GetSampleSum(), "lines")
		}
	}
	// Output: 3 batches, 5 lines
}

// An exporter started before its engine registers a collector that opens the book once it exists,
// answering outbox_up 0 until then.
func ExampleNewOpeningCollector() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sidecar")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "book.db")
	var book *outbox.Store
	c := metrics.NewOpeningCollector(func(ctx context.Context) (*outbox.Store, error) {
		if _, err := os.Stat(path); err != nil {
			return nil, err // not created yet: outbox_up 0
		}
		var err error
		book, err = outbox.OpenReadOnly(ctx, path)
		return book, err
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	up := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "outbox_up" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	fmt.Println("before the engine:", up())

	engine, err := outbox.Open(ctx, path)
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()
	fmt.Println("once the engine made the book:", up())
	book.Close()
	// Output:
	// before the engine: 0
	// once the engine made the book: 1
}
