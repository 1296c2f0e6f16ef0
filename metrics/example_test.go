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
