// SPDX-License-Identifier: Apache-2.0

// Package metrics exports an outbox's figures as Prometheus metrics: the book's (NewCollector), a
// consumer's inbox's (NewInboxCollector), a segmented journal's (NewJournalCollector), a JetStream
// stream's and its registered readers' (NewStreamCollector) and a relay's appends to its sink
// (NewSinkMetrics, RelayOption). It is a module of its own, so that the outbox and the inbox do not depend on
// client_golang; the `outbox metrics` exporter serves the same collectors, so that every series has
// one definition, whether an engine registers it in its own process or a sidecar reads the files.
//
// An engine registers the book's collector and the sink's histograms on its own registry, and wires
// the relay in one option:
//
//	reg.MustRegister(metrics.NewCollector(store))
//	relay, err := outbox.NewRelay(store, sink, runID, metrics.RelayOption(reg))
//
// and a platform its inbox's:
//
//	reg.MustRegister(metrics.NewInboxCollector(in))
//
// # Reading at each scrape
//
// The collectors keep no figures of their own: each scrape reads the figures the databases keep, on
// their read pools (never waiting for a running write), under a deadline (WithTimeout, 10 seconds by
// default), at a cost bounded by the runs, never by the lines: the book's totals are one pass over a
// row per run, its per-run series come from an index of the runs with lines pending, and the inbox's
// counts are one row. The journal's collector reads its directory without its lock (journal.Status):
// a listing of the segments and the readers' files, bounded by them, never by the lines. A scrape
// whose read fails answers outbox_up 0 (outbox_inbox_up 0, outbox_journal_up 0) and nothing else of
// that database or directory; the collectors log nothing (WithErrorHandler hears of the error).
//
// # Counters
//
// outbox_lines_enqueued_total and outbox_lines_projected_total are the sums of every run's figures,
// which the book keeps for its life; outbox_inbox_lines_applied_total, _duplicates_total,
// _stale_total and _quarantined_total are counts the inbox adds to in the transaction that applies
// the lines; outbox_journal_segments_deleted_total and _deleted_under_cap_total are totals
// retention keeps in the journal's directory. All of them survive restarts and never go down, so
// rate() works across restarts of the engine, the platform and the exporter.
//
// # Per-run series and their grace period
//
// A run has series of its own (outbox_run_*, label "run") while it has lines pending or is stopped,
// and for a grace period after that (WithGrace, DefaultGrace: 10 minutes), counted from the last
// scrape that saw it with lines pending. A busy run whose pending lines drop to zero between two
// batches keeps its series, so they do not vanish and come back from one scrape to the next, and a
// rate() or a graph over them is not broken. A run idle for longer than the grace period loses them,
// so the series stay bounded by the runs that were recently active, never by every engine start. The
// grace period is the collector's: a new collector (a restart of the exporter) starts without it and
// names the runs with lines pending.
package metrics
