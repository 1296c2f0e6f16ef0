// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"testing"

	"github.com/textmachine/outbox/outbox"
)

// BenchmarkReadOnlyStore measures a read-only store's reads of a book no writer holds open (read as
// immutable, every page read checking that no -wal has appeared) and of a book a writer holds open
// (SQLite's own WAL reader), beside the same reads through the writer's store, whose pool keeps its
// connections (baseline): a run's pending lines, and the listing of every run, on 100 runs of 1,000
// lines. A read-only store opens a connection per operation (see readonly.go).
func BenchmarkReadOnlyStore(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"baseline", "beside_writer", "closed_book"} {
		b.Run(mode, func(b *testing.B) {
			w := prefilledStore(b, 100_000)
			path := w.Path()
			if mode == "closed_book" {
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			ro := w
			if mode != "baseline" {
				var err error
				if ro, err = outbox.OpenReadOnly(ctx, path); err != nil {
					b.Fatal(err)
				}
				defer ro.Close()
			}
			b.Run("pending", func(b *testing.B) {
				n := 0
				for b.Loop() {
					lines, err := ro.PendingEvents(ctx, "old-run-042", 0, 1000)
					if err != nil {
						b.Fatal(err)
					}
					n += len(lines)
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
			})
			b.Run("all_runs", func(b *testing.B) {
				for b.Loop() {
					for _, err := range ro.AllRuns(ctx) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		})
	}
}
