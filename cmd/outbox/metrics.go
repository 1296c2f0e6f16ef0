// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["metrics"] = command{
		summary: "serve a book's figures as Prometheus metrics (read-only; works beside a running engine)",
		run:     runMetrics,
	}
}

const metricsAbout = `
Serves Prometheus metrics at http://ADDR/metrics until interrupted, read from the databases at each
scrape, and a page at http://ADDR/ that links to them. With --db, the book's: for the whole book,
how many runs it holds rows of, how many of them stopped, the lines stored and not yet projected,
and the age of the oldest line not yet projected; the ledger's size; the sizes of the database and
its WAL. A run has series of its own (label "run": its highest seq, the seq projected up to, its
lines stored and not yet projected, the age of the oldest of them) only while it has something to
say: lines not yet projected, or a projection a relay stopped on the sink's refusal
(outbox_run_stopped, 1). Every engine start begins a run, so series for every run would grow
without end; these come and go with the runs that need an operator. With --inbox, a consumer's
inbox: how many runs it has applied, each quarantined run (one series per quarantined run, none
for a healthy one) with its high-water mark, per file source the bytes still to be read to the
file's end, and per JetStream stream source the last stream sequence applied (the stream's own
last sequence is the server's to export: the exporter connects to no server). Give either or both. It opens each database read-only, as stats does: it runs beside
an engine and a consumer, keeps working when one starts or stops, and on a database no process
holds open leaves the directory as it found it. outbox_build_info names the version (as outbox
version prints it), and the go_ and process_ series are the exporter's own process.

It listens on localhost:9465 unless --listen says otherwise (--listen :9465 for every interface).
That port is not 9464, which OpenTelemetry's Prometheus exporter takes by default, and an engine
instrumented with OpenTelemetry may run on the same host; nor NATS's 4222 and 8222 or the NATS
exporter's 7777, nor Prometheus's own 9090.

What only the engine's process knows (sink errors, retries, batch sizes) comes from the relay's
hooks in that process; the README shows how. Prints the address it listens on, then serves.

Exit status: 0 when interrupted, 2 on a usage or I/O error (such as the address in use, or a
database that cannot be opened).`

// defaultListen is where metrics listens without --listen (see metricsAbout for why this port).
const defaultListen = "localhost:9465"

// metricsConfig is the parsed command line of metrics.
type metricsConfig struct {
	db, inbox, listen string
}

// parseMetrics parses the command line of metrics; done is set when parsing ended the command,
// with the exit status to return.
func parseMetrics(args []string, stderr io.Writer) (cfg metricsConfig, code int, done bool) {
	fs := newFlags("metrics", "outbox metrics (--db FILE | --inbox FILE | --db FILE --inbox FILE) [--listen ADDR]", metricsAbout)
	fs.StringVar(&cfg.db, "db", "", "the book's database `file`")
	fs.StringVar(&cfg.inbox, "inbox", "", "a consumer's database `file`, holding its inbox")
	fs.StringVar(&cfg.listen, "listen", defaultListen, "listen on `addr` (port 0: any free port)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return cfg, code, true
	}
	if cfg.listen == "" {
		return cfg, usageError(stderr, "outbox metrics", "--listen needs an address, HOST:PORT or :PORT"), true
	}
	if len(pos) != 0 || (cfg.db == "" && cfg.inbox == "") {
		return cfg, usageError(stderr, "outbox metrics", "need --db FILE or --inbox FILE (or both), and no arguments"), true
	}
	return cfg, 0, false
}

func runMetrics(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, code, done := parseMetrics(args, stderr)
	if done {
		return code
	}
	reg := prometheus.NewPedanticRegistry()
	if err := registerProcess(reg); err != nil {
		return failErr(stderr, exitUsage, "metrics", err)
	}
	var served []string
	if cfg.db != "" {
		s, err := openReadOnly(ctx, cfg.db)
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		defer s.Close()
		if err := reg.Register(&bookCollector{s: s, stderr: stderr}); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, quote(cfg.db))
	}
	if cfg.inbox != "" {
		in, err := openInboxReadOnly(ctx, cfg.inbox)
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		defer in.Close()
		if err := reg.Register(&inboxCollector{in: in, path: cfg.inbox, stderr: stderr}); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, "the inbox of "+quote(cfg.inbox))
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return failErr(stderr, exitUsage, "metrics", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.Handle("GET /{$}", landingPage(served))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "serving metrics of %s at http://%s/metrics\n", strings.Join(served, " and "), ln.Addr())
	select {
	case err := <-errs:
		return failErr(stderr, exitUsage, "metrics", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return failErr(stderr, exitUsage, "metrics", err)
	}
	return exitOK
}

// registerProcess registers what describes the exporter's own process: its build, and the Go
// runtime's and the operating system's figures for it.
func registerProcess(reg prometheus.Registerer) error {
	version, revision, modified := "(unknown)", "", false // as outbox version says of a build without module support
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, revision, modified = buildVersion(bi)
	}
	switch {
	case revision == "":
		revision = "unknown"
	case modified:
		revision += "-modified" // as prometheus/common's version package marks a modified tree
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_build_info",
		Help:        "1, labelled with the version of the outbox module this exporter was built from, its VCS revision (unknown when the build recorded none; -modified for a tree with uncommitted changes) and the Go version that built it.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	info.Set(1)
	return errors.Join(reg.Register(info), reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})))
}

// landingTemplate is the page at /. html/template escapes what it is given; the names are quoted
// first (see quote), so a control byte in a path shows as an escape, not as itself.
var landingTemplate = template.Must(template.New("landing").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>outbox metrics</title></head>
<body><h1>outbox metrics</h1>
<p>Metrics of {{range $i, $s := .}}{{if $i}} and {{end}}{{$s}}{{end}}, read at each scrape: <a href="/metrics">/metrics</a>.</p>
</body></html>
`))

// landingPage serves the page at / that says what is served and links to it, as Prometheus's own
// exporters do.
func landingPage(served []string) http.Handler {
	var b strings.Builder
	if err := landingTemplate.Execute(&b, served); err != nil {
		panic(err) // the template and its data are the program's own
	}
	page := b.String()
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	})
}

// The book's series are bounded by what needs attention, never by the runs the book has seen: the
// book-wide figures, and a run's own series only while it has lines not yet projected or is stopped.
var (
	runLabels          = []string{"run"}
	descUp             = prometheus.NewDesc("outbox_up", "1 when the last read of the book succeeded, 0 when it failed.", nil, nil)
	descRuns           = prometheus.NewDesc("outbox_runs", "Runs the book holds rows of, buffered lines or once keys in the ledger (one figure for the book, not a series per run).", nil, nil)
	descStoppedRuns    = prometheus.NewDesc("outbox_stopped_runs", "Runs whose projection a relay stopped because the sink refused their lines (see outbox stats).", nil, nil)
	descPendingAll     = prometheus.NewDesc("outbox_pending_lines", "Lines pending: not yet projected, of all runs together.", nil, nil)
	descStoredAll      = prometheus.NewDesc("outbox_stored_lines", "Lines still stored in the database, of all runs together.", nil, nil)
	descOldestAgeAll   = prometheus.NewDesc("outbox_oldest_pending_age_seconds", "Age of the oldest line not yet projected, of any run; absent when there is none or its time is unknown.", nil, nil)
	descLastSeq        = prometheus.NewDesc("outbox_run_last_seq", "The highest seq the run was ever given; only for a run with lines not yet projected or stopped.", runLabels, nil)
	descProjected      = prometheus.NewDesc("outbox_run_projected_seq", "Every line of the run up to this seq is in the journal; only for a run with lines not yet projected or stopped.", runLabels, nil)
	descPending        = prometheus.NewDesc("outbox_run_pending_lines", "Lines of the run pending (not yet projected); only for a run with lines not yet projected or stopped.", runLabels, nil)
	descOldestAge      = prometheus.NewDesc("outbox_run_oldest_pending_age_seconds", "Age of the run's oldest line not yet projected; absent when there is none or its time is unknown.", runLabels, nil)
	descStopped        = prometheus.NewDesc("outbox_run_stopped", "1 for each run whose projection a relay stopped because the sink refused its lines (see outbox stats); no series for a run that is not stopped, and the series goes once the run projects again.", runLabels, nil)
	descStored         = prometheus.NewDesc("outbox_run_stored_lines", "Lines of the run still stored in the database; only for a run with lines not yet projected or stopped.", runLabels, nil)
	descEnqueuedTotal  = prometheus.NewDesc("outbox_lines_enqueued_total", "Lines ever enqueued to the book, of all runs together: it never goes down, across restarts and forgetting.", nil, nil)
	descProjectedTotal = prometheus.NewDesc("outbox_lines_projected_total", "Lines ever projected to the journal, of all runs together: it never goes down, across restarts and forgetting.", nil, nil)
	descLedger         = prometheus.NewDesc("outbox_ledger_keys", "Once keys in the announce-once ledger.", nil, nil)
	descDBBytes        = prometheus.NewDesc("outbox_database_bytes", "Size of the database file.", nil, nil)
	descWALBytes       = prometheus.NewDesc("outbox_wal_bytes", "Size of the database's WAL file (0 when there is none).", nil, nil)
	bookDescriptions   = []*prometheus.Desc{descUp, descRuns, descStoppedRuns, descPendingAll, descStoredAll, descOldestAgeAll,
		descLastSeq, descProjected, descPending, descOldestAge, descStopped, descStored, descEnqueuedTotal, descProjectedTotal,
		descLedger, descDBBytes, descWALBytes}
)

// bookCollector reads the book at each scrape.
type bookCollector struct {
	s      *outbox.Store
	stderr io.Writer
}

func (c *bookCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range bookDescriptions {
		ch <- d
	}
}

func (c *bookCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := readBookMetrics(ctx, c.s, time.Now())
	if errors.Is(err, outbox.ErrBookOpened) {
		m, err = readBookMetrics(ctx, c.s, time.Now())
	}
	if err != nil {
		// The scrape still answers, with outbox_up 0 saying the figures are missing.
		fmt.Fprintf(c.stderr, "outbox metrics: %s\n", message(err))
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descUp, 1)
	var oldest *float64
	for _, r := range m.runs {
		if r.OldestAge != nil && (oldest == nil || *r.OldestAge > *oldest) {
			oldest = r.OldestAge
		}
		run := labelValue(r.RunID)
		gauge(descLastSeq, float64(r.LastSeq), run)
		gauge(descProjected, float64(r.Projected), run)
		gauge(descPending, float64(r.Pending), run)
		gauge(descStored, float64(r.Lines), run)
		if r.Stopped != nil {
			gauge(descStopped, 1, run)
		}
		if r.OldestAge != nil {
			gauge(descOldestAge, *r.OldestAge, run)
		}
	}
	t := m.totals
	gauge(descRuns, float64(t.RunsWithRows))
	gauge(descStoppedRuns, float64(t.StoppedRuns))
	gauge(descPendingAll, float64(t.Pending))
	gauge(descStoredAll, float64(t.Lines))
	if oldest != nil {
		gauge(descOldestAgeAll, *oldest)
	}
	ch <- prometheus.MustNewConstMetric(descEnqueuedTotal, prometheus.CounterValue, float64(t.EnqueuedTotal))
	ch <- prometheus.MustNewConstMetric(descProjectedTotal, prometheus.CounterValue, float64(t.ProjectedTotal))
	gauge(descLedger, float64(t.LedgerKeys))
	gauge(descDBBytes, float64(m.fileBytes))
	gauge(descWALBytes, float64(m.walBytes))
}

// bookMetrics is what a scrape reads of a book: the totals, from a row per run, and the runs with
// something to say (lines pending, or stopped), from the index of the runs that can need work. A
// scrape costs a row per run however many lines and keys the book holds.
type bookMetrics struct {
	totals              outbox.BookTotals
	runs                []runStatsRow
	fileBytes, walBytes int64
}

func readBookMetrics(ctx context.Context, s *outbox.Store, now time.Time) (bookMetrics, error) {
	var m bookMetrics
	var err error
	if m.totals, err = s.Totals(ctx); err != nil {
		return m, err
	}
	for r, err := range s.OpenRuns(ctx) {
		if err != nil {
			return m, err
		}
		if r.Pending == 0 && r.StoppedSeq == 0 {
			continue // projected, its rows not yet forgotten: counted in the book's figures only
		}
		m.runs = append(m.runs, statsRow(r, now))
	}
	m.fileBytes, m.walBytes = fileSize(s.Path()), fileSize(s.Path()+"-wal")
	return m, nil
}

// labelValue is a run id as a label value, which must be UTF-8: an id that is not is shown escaped,
// as the text output shows it, so that two such ids stay two series.
func labelValue(runID string) string {
	if utf8.ValidString(runID) {
		return runID
	}
	return quote(runID)
}
