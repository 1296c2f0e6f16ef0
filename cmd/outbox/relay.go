// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
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

const relayAbout = `
Recovers a stopped engine's backlog: projects every run's committed lines that the journal may
lack, in order and byte for byte, records them, and forgets the projected rows, as the engine's
next start would. Takes the database's writer lock and the journal's lock, so it refuses to run
beside an engine.

--journal names a journal directory (segments, as journal.Open keeps them: the engine's kind) or
a single-file journal. An existing directory is appended to as segments, an existing file as one
file. A missing path is created as a journal directory, unless its name ends in ".jsonl": then it
is created as a single file, as before segments.

It writes only into a journal that continues this database: before writing anything it checks
that the path is a journal (not a database, a text file or anything else) and that it holds every
run up to the seq the database records as projected (a directory's seal indexes and last segment
say so without reading its history). Otherwise it exits with status 2, naming the problem, and
leaves the journal and the database as they were.

With --nats URL or --context NAME (and the other connection flags) it projects into the JetStream
stream NAME instead, under --subject-prefix, which must be the prefix the stream was created with.
With --trim as well, it then trims the stream as "outbox stream trim" does, with --keep and
--max-bytes; "outbox stream trim --every D" runs the same trim at an interval beside the engine.`

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("relay", "outbox relay --db FILE (--journal JOURNAL | (--nats URL | --context NAME) --stream NAME [--subject-prefix PREFIX])", relayAbout)
	dbPath := fs.String("db", "", "the database `file`")
	jPath := fs.String("journal", "", "the journal: a `directory` of segments or a single file (created if missing; see above)")
	streamName := fs.String("stream", "", "the JetStream stream's `name` (with --nats or --context)")
	nf := addNATSFlags(fs, "project to the NATS server at `url` instead of a journal")
	doTrim := fs.Bool("trim", false, "with --nats or --context: trim the stream once the backlog is projected")
	tf := addTrimFlags(fs)
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || (*jPath == "") == !nf.chosen() || nf.chosen() != (*streamName != "") {
		return usageError(stderr, "outbox relay", "need --db FILE and either --journal JOURNAL or --nats URL (or --context NAME) --stream NAME")
	}
	if p := nf.problem(); p != "" {
		return usageError(stderr, "outbox relay", "%s", p)
	}
	if *doTrim && !nf.chosen() {
		return usageError(stderr, "outbox relay", "--trim needs --nats URL (or --context NAME) and --stream NAME")
	}
	if p := tf.problem(); p != "" {
		return usageError(stderr, "outbox relay", "%s", p)
	}
	if err := requireBook(ctx, *dbPath); err != nil {
		return failErr(stderr, exitUsage, "relay", err)
	}
	s, err := outbox.Open(ctx, *dbPath)
	if errors.Is(err, outbox.ErrLocked) {
		return fail(stderr, exitUsage, "relay: database %s is locked (is the engine running?)", quote(*dbPath))
	}
	if err != nil {
		return failErr(stderr, exitUsage, "relay", err)
	}
	defer s.Close()
	// Every run the book ever held: a run whose rows are all forgotten still records how far the
	// journal must hold it.
	var runs []outbox.RunStats
	for r, err := range s.EveryRun(ctx) {
		if err != nil {
			return failErr(stderr, exitUsage, "relay", err)
		}
		if r.Projected > 0 || r.Pending > 0 {
			runs = append(runs, r)
		}
	}
	var sink outbox.Sink
	var dest string
	if nf.chosen() {
		ns, closeSink, err := nf.openSink(*streamName)
		if err != nil {
			return failErr(stderr, exitUsage, "relay", err)
		}
		defer closeSink()
		sink, dest = ns, "stream "+quote(*streamName)+" at "+nf.server()
	} else {
		j, err := openContinuing(ctx, *jPath, runs)
		if err != nil {
			return failErr(stderr, exitUsage, "relay", err)
		}
		defer j.Close()
		sink, dest = j, quote(*jPath)
	}

	var total int64
	for _, r := range runs {
		total += r.Pending
	}
	bar := newProgress(stderr, total)
	// A run id of its own that has no rows: Recover treats every run in the database as earlier.
	self := fmt.Sprintf("outbox-relay-%d", time.Now().UnixNano())
	relay, err := outbox.NewRelay(s, sink, self, outbox.WithOnProjected(func(_ string, n int, _ int64) { bar.add(int64(n)) }))
	if err != nil {
		return failErr(stderr, exitUsage, "relay", err)
	}
	err = relay.Recover(ctx)
	bar.done()
	if err != nil {
		return failErr(stderr, exitUsage, "relay", err)
	}
	fmt.Fprintf(stdout, "projected %s of %s into %s\n", plural(bar.n, "line"), plural(int64(len(runs)), "run"), dest)
	if *doTrim {
		js, closeConn, err := nf.connect()
		if err != nil {
			return failErr(stderr, exitUsage, "relay", err)
		}
		defer closeConn()
		if err := tf.trimOnce(ctx, js, *streamName, nf.prefix, stdout, stderr); err != nil {
			return failErr(stderr, exitUsage, "relay: trim", err)
		}
	}
	return exitOK
}

// journalSink is what the relay needs of a journal, a directory (journal.Journal) or a file
// (journal.File).
type journalSink interface {
	outbox.Sink
	LastSeqContext(ctx context.Context, runID string) (int64, error)
	Close() error
}

// openContinuing opens the journal at path for the relay, refusing one that does not continue the
// database: a path that is not a journal at all (journal.Open and journal.OpenFile refuse it and
// leave it as it was), or one that lacks lines the database records as projected (a new or emptied
// journal, another book's journal). Appending to either would corrupt what is not ours, or start
// runs mid-way, and the relay would then forget rows whose lines no journal holds. A missing path
// continues only a database that has projected nothing, and is refused before anything is created.
// Reading the journal stops when ctx is done (a signal), leaving it as it was.
func openContinuing(ctx context.Context, path string, runs []outbox.RunStats) (journalSink, error) {
	dir := !strings.HasSuffix(path, ".jsonl")
	switch st, err := os.Stat(path); {
	case errors.Is(err, os.ErrNotExist):
		for _, r := range runs {
			if r.Projected > 0 {
				return nil, notContinued(path, r, 0)
			}
		}
	case err != nil:
		return nil, err
	case st.IsDir():
		dir = true
		if _, err := journal.SegmentsOf(path); errors.Is(err, journal.ErrNotJournal) {
			// An empty directory is a new journal: Open would create its first segment in it.
			if entries, err := os.ReadDir(path); err == nil && len(entries) == 0 {
				for _, r := range runs {
					if r.Projected > 0 {
						return nil, notContinued(path, r, 0)
					}
				}
			}
		}
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("journal %s is not a regular file", quote(path))
	default:
		dir = false
	}
	var j journalSink
	var err error
	if dir {
		j, err = openDir(path)
	} else {
		j, err = openFile(path)
	}
	if errors.Is(err, journal.ErrNotJournal) {
		return nil, fmt.Errorf("%w; nothing was written", err)
	}
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.Projected == 0 {
			continue
		}
		last, err := j.LastSeqContext(ctx, r.RunID)
		if err == nil && last < r.Projected {
			err = notContinued(path, r, last)
		}
		if err != nil {
			j.Close()
			return nil, err
		}
	}
	return j, nil
}

// openDir and openFile return a nil interface, not a nil pointer in one, on an error.
func openDir(path string) (journalSink, error) {
	j, err := journal.Open(path)
	if err != nil {
		return nil, err
	}
	return j, nil
}

func openFile(path string) (journalSink, error) {
	j, err := journal.OpenFile(path)
	if err != nil {
		return nil, err
	}
	return j, nil
}

func notContinued(path string, r outbox.RunStats, last int64) error {
	return fmt.Errorf("journal %s holds run %s up to seq %d, but the database records it projected up to seq %d: "+
		"it is not this book's journal, or it lost lines; nothing was written", quote(path), quote(r.RunID), last, r.Projected)
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
	return &progress{w: w, total: total, tty: isTerminal(w)}
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
