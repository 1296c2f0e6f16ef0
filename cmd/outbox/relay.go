package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["relay"] = command{
		summary: "project everything every run left behind into the journal, then exit",
		run:     runRelay,
	}
}

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox relay", flag.ContinueOnError)
	dbPath := fs.String("db", "", "the database `file`")
	jPath := fs.String("journal", "", "the journal `file` (created if missing)")
	natsURL := fs.String("nats", "", "project to the NATS server at `URL` instead of a journal file")
	streamName := fs.String("stream", "", "the JetStream stream `NAME` (with --nats)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: outbox relay --db FILE (--journal FILE | --nats URL --stream NAME)\n\nRecovers a stopped engine's backlog: projects every run's committed lines that the\njournal may lack, in order and byte for byte, records them, and forgets the projected\nrows, as the engine's next start would. Takes the database's writer lock and the\njournal's lock, so it refuses to run beside an engine.\n\nflags:")
		fs.PrintDefaults()
	}
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || (*jPath == "") == (*natsURL == "") || (*natsURL != "") != (*streamName != "") {
		return usageError(stderr, "outbox relay", "need --db FILE and either --journal FILE or --nats URL --stream NAME")
	}
	if _, err := os.Stat(*dbPath); err != nil {
		return fail(stderr, exitUsage, "relay: %v", err)
	}
	s, err := outbox.Open(ctx, *dbPath)
	if errors.Is(err, outbox.ErrLocked) {
		return fail(stderr, exitUsage, "relay: %v (is the engine running?)", err)
	}
	if err != nil {
		return fail(stderr, exitUsage, "relay: %v", err)
	}
	defer s.Close()
	var sink outbox.Sink
	dest := *jPath
	if *natsURL != "" {
		ns, closeSink, err := openNATSSink(*natsURL, *streamName)
		if err != nil {
			return fail(stderr, exitUsage, "relay: %v", err)
		}
		defer closeSink()
		sink, dest = ns, *streamName+" at "+*natsURL
	} else {
		j, err := journal.OpenFile(*jPath)
		if err != nil {
			return fail(stderr, exitUsage, "relay: %v", err)
		}
		defer j.Close()
		sink = j
	}

	runs, err := s.Runs(ctx)
	if err != nil {
		return fail(stderr, exitUsage, "relay: %v", err)
	}
	var total int64
	for _, r := range runs {
		total += max(0, r.LastSeq-r.Projected)
	}
	bar := newProgress(stderr, total)
	// A run id of its own that has no rows: Recover treats every run in the database as earlier.
	self := fmt.Sprintf("outbox-relay-%d", time.Now().UnixNano())
	relay := outbox.NewRelay(s, sink, self, outbox.WithOnProjected(func(_ string, n int, _ int64) { bar.add(int64(n)) }))
	err = relay.Recover(ctx)
	bar.done()
	if err != nil {
		return fail(stderr, exitUsage, "relay: %v", err)
	}
	fmt.Fprintf(stdout, "projected %d lines of %d runs into %s\n", bar.n, len(runs), dest)
	return exitOK
}

// progress draws a bar on a terminal and prints plain counts, at most once a second, elsewhere.
type progress struct {
	w        io.Writer
	total, n int64
	tty      bool
	last     time.Time
	printed  int64 // the count last printed, off a terminal
}

func newProgress(w io.Writer, total int64) *progress {
	p := &progress{w: w, total: total}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) add(n int64) {
	p.n += n
	switch {
	case p.tty:
		const width = 40
		fill := width
		if p.total > 0 {
			fill = int(min(p.n, p.total) * width / p.total)
		}
		fmt.Fprintf(p.w, "\r[%s%s] %d/%d lines", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), p.n, p.total)
	case time.Since(p.last) >= time.Second:
		p.last, p.printed = time.Now(), p.n
		fmt.Fprintf(p.w, "projected %d/%d lines\n", p.n, p.total)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprintln(p.w)
	} else if p.n > 0 && p.n != p.printed {
		fmt.Fprintf(p.w, "projected %d/%d lines\n", p.n, p.total)
	}
}
