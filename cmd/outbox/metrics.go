package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
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
scrape. With --db, the book's: per run the highest seq, the seq projected up to, the lines not yet
projected and the age of the oldest of them, and whether its projection stopped on the sink's
refusal (outbox_run_stopped); the ledger's size; the sizes of the database and its
WAL. With --inbox, a consumer's inbox: how many runs it has applied, each quarantined run (one
series per quarantined run, none for a healthy one) with its high-water mark, and per file source
the bytes still to be read to the file's end. Give either or both. It opens each database
read-only, as stats does: it runs beside an engine and a consumer, keeps working when one starts
or stops, and on a database no process holds open leaves the directory as it found it.

What only the engine's process knows (sink errors, retries, batch sizes) comes from the relay's
hooks in that process; the README shows how. Prints the address it listens on, then serves.`

func runMetrics(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("metrics", "outbox metrics (--db FILE | --inbox FILE | --db FILE --inbox FILE) --listen ADDR", metricsAbout)
	dbPath := fs.String("db", "", "the book's database `file`")
	inboxPath := fs.String("inbox", "", "a consumer's database `file`, holding its inbox")
	listen := fs.String("listen", "", "listen on `addr`, such as localhost:9464 (port 0: any free port)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || (*dbPath == "" && *inboxPath == "") || *listen == "" {
		return usageError(stderr, "outbox metrics", "need --db FILE or --inbox FILE (or both) and --listen ADDR")
	}
	reg := prometheus.NewPedanticRegistry()
	var served []string
	if *dbPath != "" {
		s, err := openReadOnly(ctx, *dbPath)
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		defer s.Close()
		if err := reg.Register(&bookCollector{s: s, stderr: stderr}); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, quote(*dbPath))
	}
	if *inboxPath != "" {
		in, err := openInboxReadOnly(ctx, *inboxPath)
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		defer in.Close()
		if err := reg.Register(&inboxCollector{in: in, path: *inboxPath, stderr: stderr}); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, "the inbox of "+quote(*inboxPath))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return failErr(stderr, exitUsage, "metrics", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
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

var (
	runLabels        = []string{"run"}
	descUp           = prometheus.NewDesc("outbox_up", "1 when the last read of the book succeeded, 0 when it failed.", nil, nil)
	descLastSeq      = prometheus.NewDesc("outbox_run_last_seq", "The highest seq the run was ever given.", runLabels, nil)
	descProjected    = prometheus.NewDesc("outbox_run_projected_seq", "Every line of the run up to this seq is in the journal.", runLabels, nil)
	descUnprojected  = prometheus.NewDesc("outbox_run_unprojected_lines", "Lines of the run not yet projected.", runLabels, nil)
	descOldestAge    = prometheus.NewDesc("outbox_run_oldest_unprojected_age_seconds", "Age of the run's oldest line not yet projected; absent when there is none or its time is unknown.", runLabels, nil)
	descStopped      = prometheus.NewDesc("outbox_run_stopped", "1 when a relay stopped projecting the run because the sink refused its lines (see outbox stats), else 0; it goes back to 0 once the run projects again.", runLabels, nil)
	descStored       = prometheus.NewDesc("outbox_run_stored_lines", "Lines of the run still stored in the database.", runLabels, nil)
	descLedger       = prometheus.NewDesc("outbox_ledger_keys", "Once keys in the announce-once ledger.", nil, nil)
	descDBBytes      = prometheus.NewDesc("outbox_database_bytes", "Size of the database file.", nil, nil)
	descWALBytes     = prometheus.NewDesc("outbox_wal_bytes", "Size of the database's WAL file (0 when there is none).", nil, nil)
	bookDescriptions = []*prometheus.Desc{descUp, descLastSeq, descProjected, descUnprojected, descOldestAge, descStopped, descStored, descLedger, descDBBytes, descWALBytes}
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
	rep, err := collectStats(ctx, c.s, time.Now())
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
	for _, r := range rep.Runs {
		run := labelValue(r.RunID)
		gauge(descLastSeq, float64(r.LastSeq), run)
		gauge(descProjected, float64(r.Projected), run)
		gauge(descUnprojected, float64(r.Pending), run)
		gauge(descStored, float64(r.Lines), run)
		stopped := 0.0
		if r.Stopped != nil {
			stopped = 1
		}
		gauge(descStopped, stopped, run)
		if r.OldestAge != nil {
			gauge(descOldestAge, *r.OldestAge, run)
		}
	}
	gauge(descLedger, float64(rep.Ledger))
	gauge(descDBBytes, float64(rep.FileBytes))
	gauge(descWALBytes, float64(rep.WALBytes))
}

// labelValue is a run id as a label value, which must be UTF-8: an id that is not is shown escaped,
// as the text output shows it, so that two such ids stay two series.
func labelValue(runID string) string {
	if utf8.ValidString(runID) {
		return runID
	}
	return quote(runID)
}
