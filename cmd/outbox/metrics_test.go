// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// bookSeries is the scrape's book series (outbox_ but not the inbox's or the build's), by name and
// labels.
func bookSeries(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, "outbox_") && !strings.HasPrefix(k, "outbox_inbox_") && !strings.HasPrefix(k, "outbox_build_info") {
			out[k] = v
		}
	}
	return out
}

// withoutSizes drops the figures that move with the files' sizes.
func withoutSizes(m map[string]float64) map[string]float64 {
	for _, k := range []string{`outbox_database_bytes`, `outbox_wal_bytes`, `outbox_oldest_pending_age_seconds`, `outbox_run_oldest_pending_age_seconds{run="dead"}`} {
		delete(m, k)
	}
	return m
}

func TestMetricsExportNoSeriesForARunWithNothingToSay(t *testing.T) {
	dbPath, _ := book(t) // "old": 2 lines projected; "dead": 3 lines (one once key), none projected
	url, stop := startMetrics(t, dbPath)
	defer stop()
	m := scrape(t, url)
	want := map[string]float64{
		`outbox_up`:                            1,
		`outbox_runs`:                          2,
		`outbox_stopped_runs`:                  0,
		`outbox_pending_lines`:                 3,
		`outbox_stored_lines`:                  5,
		`outbox_ledger_keys`:                   0,
		`outbox_lines_enqueued_total`:          5,
		`outbox_lines_projected_total`:         2,
		`outbox_run_last_seq{run="dead"}`:      3,
		`outbox_run_projected_seq{run="dead"}`: 0,
		`outbox_run_pending_lines{run="dead"}`: 3,
		`outbox_run_stored_lines{run="dead"}`:  3,
	}
	if diff := cmp.Diff(want, withoutSizes(bookSeries(m))); diff != "" {
		t.Errorf("the book's series (-want +got):\n%s", diff)
	}
	for _, k := range []string{`outbox_oldest_pending_age_seconds`, `outbox_run_oldest_pending_age_seconds{run="dead"}`} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in the scrape", k)
		}
	}
}

func TestMetricsKeepABoundedLabelSetAcrossManyEngineStarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// Each start is an engine's: it recovers the runs before it, begins its own run with a once
	// key (whose row the ledger keeps for ever, and the run with it), and projects it.
	start := func(i int) {
		t.Helper()
		s, err := outbox.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		run := fmt.Sprintf("engine-%03d", i)
		relay, err := outbox.NewRelay(s, j, run, outbox.WithForgetProjected(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.EnqueueOnce(ctx, run, "unit:"+run, journal.Builder(run, "unit_done", i)); err != nil {
			t.Fatal(err)
		}
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A series per run would show after the second start; 50 are many times that, and each start
	// (an Open, a Recover, two enqueues and a projection under the race detector) is the test's cost.
	const starts = 50
	start(0)
	url, stop := startMetrics(t, dbPath)
	defer stop()
	first := withoutSizes(bookSeries(scrape(t, url)))
	for i := 1; i < starts; i++ {
		start(i)
	}
	after := withoutSizes(bookSeries(scrape(t, url)))
	if after[`outbox_runs`] != starts || after[`outbox_ledger_keys`] != starts {
		t.Errorf("outbox_runs %v, outbox_ledger_keys %v; want %d each", after[`outbox_runs`], after[`outbox_ledger_keys`], starts)
	}
	names := func(m map[string]float64) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	if len(after) != len(first) {
		t.Errorf("%d series after %d engine starts, %d after one: %v", len(after), starts, len(first), names(after))
	}
	for k := range after {
		if strings.Contains(k, `run="`) {
			t.Errorf("a series for a run with nothing to say: %s", k)
		}
	}
}

func TestMetricsExportBuildInfo(t *testing.T) {
	dbPath, _ := book(t)
	url, stop := startMetrics(t, dbPath)
	defer stop()
	m := scrape(t, url)
	code, out, _ := runOutbox(t, "version")
	if code != exitOK {
		t.Fatalf("version: exit %d", code)
	}
	version := strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "outbox ")
	version, _, _ = strings.Cut(version, " (revision ")
	var found []string
	for k, v := range m {
		if strings.HasPrefix(k, "outbox_build_info{") {
			found = append(found, k)
			if v != 1 {
				t.Errorf("%s = %v, want 1", k, v)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("outbox_build_info series: %v", found)
	}
	for _, label := range []string{`goversion="` + runtime.Version() + `"`, `version="` + version + `"`, `revision="`} {
		if !strings.Contains(found[0], label) {
			t.Errorf("%s lacks %s", found[0], label)
		}
	}
	// The exporter's own process: the Go runtime's and the operating system's figures.
	for _, k := range []string{"go_goroutines", "go_info{version=\"" + runtime.Version() + "\"}"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in the scrape", k)
		}
	}
	if runtime.GOOS == "linux" {
		if _, ok := m["process_start_time_seconds"]; !ok {
			t.Error("no process_start_time_seconds in the scrape")
		}
	}
}

func TestMetricsServeALandingPage(t *testing.T) {
	src, _ := book(t)
	// A path that would be markup, and a control byte, in a page that names it.
	dir := filepath.Join(t.TempDir(), "<b>x&\x1b[31m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(dir, "book.db")
	if err := os.Rename(src, dbPath); err != nil {
		t.Fatal(err)
	}
	url, stop := startMetrics(t, dbPath)
	defer stop()
	root := strings.TrimSuffix(url, "metrics")
	resp, err := http.Get(root)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(page, `<a href="/metrics">`) {
		t.Errorf("the page does not link to /metrics:\n%s", page)
	}
	if strings.Contains(page, "<b>") || strings.Contains(page, "\x1b") || !strings.Contains(page, "&lt;b&gt;x&amp;\\x1b[31m") {
		t.Errorf("the page shows the path unescaped:\n%s", page)
	}
	resp, err = http.Get(root + "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /elsewhere: %d, want 404", resp.StatusCode)
	}
}

func TestMetricsListenOnTheDefaultPortWithoutListen(t *testing.T) {
	dbPath, _ := book(t)
	cfg, code, done := parseMetrics([]string{"--db", dbPath}, io.Discard)
	if done || cfg.listen != "localhost:9465" {
		t.Fatalf("parsed %+v (exit %d, done %v); want --listen localhost:9465", cfg, code, done)
	}
	if _, out, _ := cli(t, "metrics", "--help"); !strings.Contains(out, "(default localhost:9465)") {
		t.Errorf("the help does not show the default:\n%s", out)
	}
	// Holding the port, the command started without --listen must fail to bind that port, and say
	// so. When something else on this machine holds it, that part is left out: were the port freed
	// meanwhile, the command would serve until interrupted.
	ln, err := net.Listen("tcp", "localhost:9465")
	if err != nil {
		t.Logf("the default port is in use on this machine, so only the parsed default was checked: %v", err)
		return
	}
	defer ln.Close()
	code, _, errOut := runOutbox(t, "metrics", "--db", dbPath)
	if code != exitUsage || !strings.Contains(errOut, ":9465") || !strings.Contains(errOut, "address already in use") {
		t.Errorf("metrics without --listen, the default port taken: exit %d, %q", code, errOut)
	}
}

func TestMetricsWithAnEmptyListenSaysTheAddressIsMissing(t *testing.T) {
	dbPath := emptyBook(t)
	code, _, errOut := cli(t, "metrics", "--db", dbPath, "--listen", "")
	if code != exitUsage || !strings.HasPrefix(errOut, "outbox metrics: --listen needs an address") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// An exporter started before its engine and its consumer serves: outbox_up 0 (outbox_inbox_up 0)
// while the databases do not exist, 1 once they do, and it exits 0 when interrupted.
func TestMetricsAnswersUpZeroWhileTheBookDoesNotExistAndOneOnceItDoes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, inboxPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "consumer.db")
	// SQLite creates a database's file before it writes a byte: an empty file is one not created yet.
	if err := os.WriteFile(inboxPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	url, stop := startMetricsWith(t, "--db", dbPath, "--inbox", inboxPath)
	for range 2 {
		m := scrape(t, url)
		if v, ok := m[`outbox_up`]; !ok || v != 0 {
			t.Fatalf("before the book exists: outbox_up %v, %v", v, ok)
		}
		if v, ok := m[`outbox_inbox_up`]; !ok || v != 0 {
			t.Fatalf("before the inbox exists: outbox_inbox_up %v, %v", v, ok)
		}
		if _, ok := m[`outbox_lines_enqueued_total`]; ok {
			t.Fatalf("a counter of a book that does not exist: %v", m)
		}
	}
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "t", 1)); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, inboxPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	m := scrape(t, url)
	if m[`outbox_up`] != 1 || m[`outbox_lines_enqueued_total`] != 1 || m[`outbox_run_pending_lines{run="r"}`] != 1 {
		t.Errorf("once the book exists: %v", bookSeries(m))
	}
	if m[`outbox_inbox_up`] != 1 || m[`outbox_inbox_lines_applied_total`] != 0 {
		t.Errorf("once the inbox exists: %v", inboxSeries(m))
	}
	code, errOut := stop()
	if code != exitOK || !strings.Contains(errOut, "does not exist") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// An exporter given a journal beside a book serves both: outbox_journal_up 0 until the journal's
// directory exists, then its size and each registered reader's lag, and says on standard error why
// the first scrapes could not read it.
func TestMetricsServesAJournalsSizeAndReadersLagBesideABook(t *testing.T) {
	dir := t.TempDir()
	dbPath, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	url, stop := startMetricsWith(t, "--db", dbPath, "--journal", jDir)
	m := scrape(t, url)
	if v, ok := m[`outbox_journal_up`]; !ok || v != 0 {
		t.Fatalf("before the journal exists: outbox_journal_up %v, %v", v, ok)
	}
	if _, ok := m[`outbox_journal_bytes`]; ok {
		t.Fatalf("the size of a journal that does not exist: %v", m)
	}
	if v, ok := m[`outbox_up`]; !ok || v != 0 {
		t.Fatalf("the book's series beside the journal's: outbox_up %v, %v", v, ok)
	}
	j, err := journal.Open(jDir, journal.WithSegmentSize(500))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for seq := int64(1); seq <= 30; seq++ {
		line := fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"w":%q}`, seq, strings.Repeat("w", 20))
		if err := j.Append(context.Background(), "r", []outbox.EventLine{{Seq: seq, Line: line}}); err != nil {
			t.Fatal(err)
		}
	}
	st := j.Stats()
	if err := journal.SetReader(jDir, "platform", 0); err != nil {
		t.Fatal(err)
	}
	m = scrape(t, url)
	want := map[string]float64{
		`outbox_journal_up`:                                     1,
		`outbox_journal_bytes`:                                  float64(st.Bytes),
		`outbox_journal_segments`:                               float64(st.Segments),
		`outbox_journal_reader_lag_bytes{reader="platform"}`:    float64(st.End),
		`outbox_journal_reader_lag_segments{reader="platform"}`: float64(st.Segments),
		`outbox_journal_segments_deleted_total`:                 0,
		`outbox_journal_segments_deleted_under_cap_total`:       0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v, %v; want %v", k, got, ok, v)
		}
	}
	if st.Segments < 2 {
		t.Errorf("the appends sealed no segment: %+v", st)
	}
	code, errOut := stop()
	if code != exitOK || !strings.Contains(errOut, "journal") || !strings.Contains(errOut, "no such file") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestMetricsServesTheBooksFiguresBesideARunningEngine(t *testing.T) {
	ctx := context.Background()
	dbPath, _ := book(t) // "old": 2 lines projected; "dead": 3 lines, none projected
	url, stop := startMetrics(t, dbPath)

	m := scrape(t, url)
	want := map[string]float64{
		`outbox_up`: 1, `outbox_run_last_seq{run="dead"}`: 3, `outbox_run_projected_seq{run="dead"}`: 0,
		`outbox_run_pending_lines{run="dead"}`: 3, `outbox_runs`: 2, `outbox_pending_lines`: 3,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("before the engine: %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{`outbox_run_oldest_pending_age_seconds{run="dead"}`, `outbox_ledger_keys`, `outbox_database_bytes`, `outbox_wal_bytes`} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in the scrape", k)
		}
	}

	// An engine opens the book after the exporter started, and commits while it is scraped.
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatalf("an engine cannot open the book beside the exporter: %v", err)
	}
	// Its first commit comes before the scrapes: Open leaves the -wal empty until a transaction
	// writes to it, and only from then on does a WAL beside the open engine hold frames (a
	// checkpoint restarts it from the start without cutting the file below journal_size_limit).
	if _, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "tick", 0)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "tick", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var last float64
	for range 5 {
		m := scrape(t, url)
		if m[`outbox_up`] != 1 {
			t.Errorf("a scrape beside the engine failed: %v", m)
		}
		seq := m[`outbox_run_last_seq{run="live"}`]
		if seq < last {
			t.Errorf("the engine's highest seq went back from %v to %v", last, seq)
		}
		last = seq
		if m[`outbox_wal_bytes`] == 0 {
			t.Error("the WAL's size is 0 beside a committing engine")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	committed, err := collect(s.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var liveLast int64
	for _, r := range committed {
		if r.RunID == "live" {
			liveLast = r.LastSeq
		}
	}
	if m := scrape(t, url); m[`outbox_run_last_seq{run="live"}`] != float64(liveLast) || liveLast == 0 {
		t.Errorf("after the engine stopped: live's highest seq %v, want %d", m[`outbox_run_last_seq{run="live"}`], liveLast)
	}
	if code, errOut := stop(); code != exitOK {
		t.Errorf("metrics after an interrupt: exit %d, %s", code, errOut)
	}
}

func TestMetricsLeavesAClosedBooksDirectoryAsItFoundIt(t *testing.T) {
	dbPath, _ := book(t)
	dir := filepath.Dir(dbPath)
	before := dirstate.Snapshot(t, dir)
	url, stop := startMetrics(t, dbPath)
	for range 3 {
		if m := scrape(t, url); m[`outbox_up`] != 1 {
			t.Errorf("scrape: %v", m)
		}
	}
	if code, errOut := stop(); code != exitOK {
		t.Errorf("exit %d, %s", code, errOut)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
}
