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
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/metrics"
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
scrape, and a page at http://ADDR/ that links to them. The series are those of the package
github.com/textmachine/outbox/metrics, which an engine or a platform can register in its own
process instead. With --db, the book's: for the whole book, the lines ever enqueued and ever
projected (counters: outbox_lines_enqueued_total, outbox_lines_projected_total, kept in the book, so
they survive restarts and never go down), how many runs it holds rows of, how many of them stopped,
the lines stored and not yet projected, and the age of the oldest line not yet projected; the
ledger's size; the sizes of the database and its WAL. A run has series of its own (label "run": its
highest seq, the seq projected up to, its lines stored and not yet projected, the age of the oldest
of them) while it has lines not yet projected or a projection a relay stopped on the sink's refusal
(outbox_run_stopped, 1), and for a grace period of 10 minutes after the last scrape that saw it
with lines pending, so that a busy run's series do not come and go between scrapes. Every engine
start begins a run, so series for every run would grow without end; these stay with the runs
recently active. With --inbox, a consumer's inbox: the lines it applied, found duplicate or stale,
and left quarantined (counters kept in its database: outbox_inbox_lines_applied_total and the
others), how many runs it has applied, each quarantined run (one series per quarantined run, none
for a healthy one) with its high-water mark, per file source the bytes still to be read to the
file's end, and per JetStream stream source the last stream sequence applied (the stream's own
last sequence is the server's: --stream exports it, beside each registered reader's lag). With --journal, a
segmented journal's directory: its bytes and segments, per registered reader the bytes and segments
it has not read (label "reader"), and the segments retention deleted and, of those, the ones deleted
under the size cap while a reader had not read them (counters kept in the directory:
outbox_journal_segments_deleted_total, outbox_journal_segments_deleted_under_cap_total).
With --stream NAME and a server (--nats URL or --context NAME), a JetStream stream, read from the
server at each scrape (jetstream.Status): its bytes (what the trim's --max-bytes bounds), messages
and last sequence, the sequence below which the trim's cap removed lines (0 when it never acted),
and per registered reader (label "reader") its lag, the stream's last sequence less the one it
registered, and the sequences the cap removed past it before it applied them (above 0, it stops
with a retention gap). Give any of them, or several. It reads the journal without its lock, as
journal status does. It opens each
database read-only, as stats does: it runs beside an engine and a consumer, keeps
working when one starts or stops, and on a database no process holds open leaves the directory as
it found it. A book, an inbox or a journal that does not exist yet is not an error: until it
does, outbox_up (outbox_inbox_up, outbox_journal_up) is 0, so that an exporter started before its engine serves. Each read
that fails says why on standard error, and its scrape answers outbox_up 0. outbox_build_info names
the version (as outbox version prints it), and the go_ and process_ series are the exporter's own
process.

It listens on localhost:9465 unless --listen says otherwise (--listen :9465 for every interface).
That port is not 9464, which OpenTelemetry's Prometheus exporter takes by default, and an engine
instrumented with OpenTelemetry may run on the same host; nor NATS's 4222 and 8222 or the NATS
exporter's 7777, nor Prometheus's own 9090.

What only the engine's process knows (the sink's latency, errors and batch sizes) comes from the
relay in that process: metrics.RelayOption; docs/OPERATING.md shows how. Prints the address it listens
on, then serves.

Exit status: 0 when interrupted, 2 on a usage or I/O error (such as the address in use, or a
database that exists and cannot be opened).`

// defaultListen is where metrics listens without --listen (see metricsAbout for why this port).
const defaultListen = "localhost:9465"

// metricsConfig is the parsed command line of metrics.
type metricsConfig struct {
	db, inbox, journal, stream, listen string
	nats                               *natsFlags
}

// parseMetrics parses the command line of metrics; done is set when parsing ended the command,
// with the exit status to return.
func parseMetrics(args []string, stderr io.Writer) (cfg metricsConfig, code int, done bool) {
	fs := newFlags("metrics", "outbox metrics [--db FILE] [--inbox FILE] [--journal DIR] [--stream NAME (--nats URL | --context NAME)] [--listen ADDR]", metricsAbout)
	fs.StringVar(&cfg.db, "db", "", "the book's database `file`")
	fs.StringVar(&cfg.inbox, "inbox", "", "a consumer's database `file`, holding its inbox")
	fs.StringVar(&cfg.journal, "journal", "", "a segmented journal's `dir`ectory")
	fs.StringVar(&cfg.stream, "stream", "", "a JetStream stream's `NAME`: its size and each registered reader's lag, read from the server")
	cfg.nats = addNATSConnFlags(fs, "the NATS server `URL` of --stream")
	fs.StringVar(&cfg.listen, "listen", defaultListen, "listen on `addr` (port 0: any free port)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return cfg, code, true
	}
	if cfg.listen == "" {
		return cfg, usageError(stderr, "outbox metrics", "--listen needs an address, HOST:PORT or :PORT"), true
	}
	if len(pos) != 0 || (cfg.db == "" && cfg.inbox == "" && cfg.journal == "" && cfg.stream == "") {
		return cfg, usageError(stderr, "outbox metrics", "need --db FILE, --inbox FILE, --journal DIR or --stream NAME (or several), and no arguments"), true
	}
	switch {
	case cfg.stream != "" && !cfg.nats.chosen():
		return cfg, usageError(stderr, "outbox metrics", "--stream NAME needs --nats URL or --context NAME"), true
	case cfg.stream == "" && cfg.nats.chosen():
		return cfg, usageError(stderr, "outbox metrics", "--nats and --context name the server of --stream NAME: give it"), true
	case cfg.nats.problem() != "":
		return cfg, usageError(stderr, "outbox metrics", "%s", cfg.nats.problem()), true
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
	var opened openedFiles
	defer opened.close()
	if cfg.db != "" {
		open := func(ctx context.Context) (*outbox.Store, error) {
			s, err := openReadOnly(ctx, cfg.db)
			if err == nil {
				opened.add(s)
			}
			return s, err
		}
		report := metrics.WithErrorHandler(func(err error) { fmt.Fprintf(stderr, "outbox metrics: %s\n", message(err)) })
		c, err := bookCollector(ctx, cfg.db, open, report)
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		if err := reg.Register(c); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, quote(cfg.db))
	}
	if cfg.inbox != "" {
		open := func(ctx context.Context) (*inbox.Inbox, error) {
			in, err := openInboxReadOnly(ctx, cfg.inbox)
			if err == nil {
				opened.add(in)
			}
			return in, err
		}
		opts := []metrics.Option{
			metrics.WithErrorHandler(func(err error) {
				fmt.Fprintf(stderr, "outbox metrics: inbox %s: %s\n", quote(cfg.inbox), message(err))
			}),
			metrics.WithStreamPositions(streamSeq),
		}
		c, err := inboxCollector(ctx, cfg.inbox, open, opts...)
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		if err := reg.Register(c); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, "the inbox of "+quote(cfg.inbox))
	}
	if cfg.journal != "" {
		report := metrics.WithErrorHandler(func(err error) {
			fmt.Fprintf(stderr, "outbox metrics: journal %s: %s\n", quote(cfg.journal), message(err))
		})
		if err := reg.Register(metrics.NewJournalCollector(cfg.journal, report)); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, "the journal "+quote(cfg.journal))
	}
	if cfg.stream != "" {
		// An exporter outlives the server's restarts: it reconnects for as long as it runs, and
		// each scrape while the server is away answers outbox_stream_up 0.
		js, closeConn, err := cfg.nats.connect(nats.MaxReconnects(-1))
		if err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		defer closeConn()
		report := metrics.WithErrorHandler(func(err error) {
			fmt.Fprintf(stderr, "outbox metrics: stream %s: %s\n", quote(cfg.stream), message(err))
		})
		if err := reg.Register(metrics.NewStreamCollector(cfg.stream, streamFigures(js, cfg.stream), report)); err != nil {
			return failErr(stderr, exitUsage, "metrics", err)
		}
		served = append(served, "the stream "+quote(cfg.stream))
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

// bookCollector returns the book's collector (package metrics, the one an engine registers). A book
// that does not exist yet, or is still empty (SQLite creates the file before it writes a byte), is
// not an error: the exporter answers outbox_up 0 until it can read it, so that a sidecar started
// before its engine serves instead of failing. Anything else that keeps the book from opening at
// the start (a directory, another program's database) is, as before: no engine will make it a book.
func bookCollector(ctx context.Context, path string, open func(context.Context) (*outbox.Store, error), opts ...metrics.Option) (prometheus.Collector, error) {
	if notYet(path) {
		return metrics.NewOpeningCollector(open, opts...), nil
	}
	s, err := open(ctx)
	if err != nil {
		return nil, err
	}
	return metrics.NewCollector(s, opts...), nil
}

// notYet reports whether path names no file yet, or an empty one: a database its program has not
// created yet.
func notYet(path string) bool {
	st, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist) || err == nil && st.Mode().IsRegular() && st.Size() == 0
}

// openedFiles are the databases the collectors opened, closed when the exporter ends.
type openedFiles struct {
	mu    sync.Mutex
	files []io.Closer
}

func (o *openedFiles) add(c io.Closer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.files = append(o.files, c)
}

func (o *openedFiles) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.files {
		c.Close()
	}
}
