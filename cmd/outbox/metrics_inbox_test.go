// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/dirstate"
)

// inboxSeries is the scrape's inbox series, by name and labels.
func inboxSeries(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, "outbox_inbox_") {
			out[k] = v
		}
	}
	return out
}

func TestMetricsServesTheInboxsStateBesideARunningConsumer(t *testing.T) {
	ctx := context.Background()
	dbPath, jPath := consumerDB(t) // a applied to 3 with 4 not yet read; b, evil, c, h quarantined
	abs, _ := filepath.Abs(jPath)
	behindKey := `outbox_inbox_source_behind_bytes{source="file:` + abs + `"}`
	url, stop := startMetricsWith(t, "--inbox", dbPath)

	want := map[string]float64{
		`outbox_inbox_up`:                                                  1,
		`outbox_inbox_runs`:                                                4, // h never applied a line
		`outbox_inbox_quarantined_runs`:                                    4,
		`outbox_inbox_run_quarantined{reason="gap",run="b"}`:               1,
		`outbox_inbox_run_quarantined{reason="gap",run="` + evilRun + `"}`: 1,
		`outbox_inbox_run_quarantined{reason="conflict",run="c"}`:          1,
		`outbox_inbox_run_quarantined{reason="handler",run="h"}`:           1,
		`outbox_inbox_quarantined_run_position{run="b"}`:                   1,
		`outbox_inbox_quarantined_run_position{run="` + evilRun + `"}`:     1,
		`outbox_inbox_quarantined_run_position{run="c"}`:                   1,
		`outbox_inbox_quarantined_run_position{run="h"}`:                   0,
		behindKey: float64(len(jline("a", 4, ""))),
	}
	// The counts the inbox keeps, from the lines consumerDB applied.
	counts, err := inboxCounts(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range counts {
		want[k] = v
	}
	if diff := cmp.Diff(want, inboxSeries(scrape(t, url))); diff != "" {
		t.Errorf("the inbox's series before the consumer runs (-want +got):\n%s", diff)
	}

	// A consumer opens the database after the exporter started, follows the journal, and commits
	// while it is scraped: a new healthy run, and a new gap.
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatalf("a consumer cannot open its database beside the exporter: %v", err)
	}
	defer in.Close()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(fctx, jPath, consumerHandler) }()
	waitUntil(t, func() bool { p, _ := in.Position(ctx, "a"); return p == 4 })
	appendJournal(t, jPath, jline("d", 1, "")+jline("e", 2, ""))
	waitUntil(t, func() bool { qs, _ := in.Quarantined(ctx); return len(qs) == 5 })
	waitUntil(t, func() bool { return scrape(t, url)[behindKey] == 0 })
	m := inboxSeries(scrape(t, url))
	if counts, err = inboxCounts(ctx, dbPath); err != nil {
		t.Fatal(err)
	}
	for k, v := range counts {
		want[k] = v
	}
	if want[`outbox_inbox_lines_applied_total`] < 2 || want[`outbox_inbox_lines_quarantined_total`] < 1 {
		t.Errorf("the counts after the consumer ran: %v", counts)
	}
	want[behindKey] = 0
	want[`outbox_inbox_runs`] = 5 // d; e was quarantined at its first line
	want[`outbox_inbox_quarantined_runs`] = 5
	want[`outbox_inbox_run_quarantined{reason="gap",run="e"}`] = 1
	want[`outbox_inbox_quarantined_run_position{run="e"}`] = 0
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("the inbox's series beside the consumer (-want +got):\n%s", diff)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("FollowFile: %v", err)
	}
	in.Close()
	if diff := cmp.Diff(want, inboxSeries(scrape(t, url))); diff != "" {
		t.Errorf("after the consumer stopped (-want +got):\n%s", diff)
	}
	if code, errOut := stop(); code != exitOK {
		t.Errorf("metrics after an interrupt: exit %d, %s", code, errOut)
	}
}

func TestMetricsInboxSeriesDoNotGrowWithHealthyRuns(t *testing.T) {
	ctx := context.Background()
	dbPath, jPath := consumerDB(t)
	url, stop := startMetricsWith(t, "--inbox", dbPath)
	defer stop()
	before := len(inboxSeries(scrape(t, url)))
	var more strings.Builder
	for i := range 200 {
		more.WriteString(jline(fmt.Sprintf("healthy-%03d", i), 1, ""))
	}
	appendJournal(t, jPath, more.String())
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFile(ctx, jPath, consumerHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	m := inboxSeries(scrape(t, url))
	if len(m) != before {
		t.Errorf("%d inbox series after 200 healthy runs, %d before:\n%v", len(m), before, m)
	}
	if m[`outbox_inbox_runs`] != 4+200 {
		t.Errorf("outbox_inbox_runs %v, want %d", m[`outbox_inbox_runs`], 4+200)
	}
}

func TestMetricsLeavesAClosedConsumersDirectoryAsItFoundIt(t *testing.T) {
	dbPath, _ := consumerDB(t)
	bookPath, _ := book(t)
	dirs := []string{filepath.Dir(dbPath), filepath.Dir(bookPath)}
	before := []map[string]string{dirstate.Snapshot(t, dirs[0]), dirstate.Snapshot(t, dirs[1])}
	url, stop := startMetricsWith(t, "--db", bookPath, "--inbox", dbPath)
	for range 3 {
		if m := scrape(t, url); m[`outbox_up`] != 1 || m[`outbox_inbox_up`] != 1 {
			t.Errorf("scrape: %v", m)
		}
	}
	if code, errOut := stop(); code != exitOK {
		t.Errorf("exit %d, %s", code, errOut)
	}
	for i, dir := range dirs {
		if diff := cmp.Diff(before[i], dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("%s changed (-before +after):\n%s", dir, diff)
		}
	}
}

func TestMetricsInboxUpIsZeroWhenTheReadFails(t *testing.T) {
	dbPath, _ := consumerDB(t)
	url, stop := startMetricsWith(t, "--inbox", dbPath)
	if m := scrape(t, url); m[`outbox_inbox_up`] != 1 {
		t.Fatalf("first scrape: %v", m)
	}
	// The file is replaced by one that is no database: the next read fails, and the scrape says so.
	if err := os.WriteFile(dbPath+".new", []byte("not a database at all, but long enough to be read as one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dbPath+".new", dbPath); err != nil {
		t.Fatal(err)
	}
	m := scrape(t, url)
	if diff := cmp.Diff(map[string]float64{`outbox_inbox_up`: 0}, inboxSeries(m)); diff != "" {
		t.Errorf("a failed read (-want +got):\n%s", diff)
	}
	code, errOut := stop()
	if code != exitOK || !strings.Contains(errOut, "outbox metrics: inbox") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// inboxCounts reads the counts the inbox keeps, as the series the exporter names them.
func inboxCounts(ctx context.Context, path string) (map[string]float64, error) {
	in, err := inbox.OpenReadOnly(ctx, path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	t, err := in.Totals(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		`outbox_inbox_lines_applied_total`:     float64(t.Applied),
		`outbox_inbox_lines_duplicates_total`:  float64(t.Duplicates),
		`outbox_inbox_lines_stale_total`:       float64(t.Stale),
		`outbox_inbox_lines_quarantined_total`: float64(t.Quarantined),
	}, nil
}
