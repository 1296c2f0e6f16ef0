// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/textmachine/outbox/internal/litedb"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["stats"] = command{
		summary: "what a book's database holds, per run (read-only; works beside a running engine)",
		run:     runStats,
	}
}

// statsReport is the --json output. Field names are part of the command's interface.
type statsReport struct {
	DB string `json:"db"`
	// DBEscaped is the path quoted as Go's %q does, given only when it is not valid UTF-8.
	DBEscaped string `json:"db_escaped,omitempty"`
	FileBytes int64  `json:"file_bytes"`
	WALBytes  int64  `json:"wal_bytes"`
	Ledger    int64  `json:"ledger_keys"`
	// RunsKnown counts every run the book knows, those whose lines are all forgotten too; Runs lists
	// only the runs with lines stored, so that the list stays as long as the work in hand.
	RunsKnown int64         `json:"runs_known"`
	Runs      []runStatsRow `json:"runs"` // last: streamStats writes the list after the rest

	runCount int64 // the runs the header names; len(Runs) unless they are streamed
}

type runStatsRow struct {
	RunID string `json:"run"`
	// RunEscaped is the run id quoted and escaped as Go's %q does, given only when the id is not valid
	// UTF-8: JSON cannot carry such bytes, and "run" then holds U+FFFD in their place.
	RunEscaped  string   `json:"run_escaped,omitempty"`
	LastSeq     int64    `json:"last_seq"`                   // the highest seq the run was ever given
	Lines       int64    `json:"lines"`                      // rows still stored
	LedgerLines int64    `json:"ledger_lines"`               // stored rows whose once key is in the ledger
	Buffered    int64    `json:"buffered"`                   // stored rows not in the ledger
	Projected   int64    `json:"projected"`                  // every seq up to this one is in the journal
	Pending     int64    `json:"pending"`                    // seqs above projected: lines not yet projected (RunStats.Pending)
	OldestAge   *float64 `json:"oldest_pending_age_seconds"` // null when nothing is pending or the age is unknown
	Stopped     *stopRow `json:"stopped"`                    // null unless the relay stopped on the sink's refusal
}

// stopRow is a run whose projection stopped because the sink refused its batch starting at Seq.
type stopRow struct {
	Seq    int64     `json:"seq"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

const statsAbout = `
Lists the runs that have lines stored; a run whose lines are all forgotten is counted in the
header's runs (as check counts it; a line under it says how many are not listed) but not listed, so that the table stays as long as the
work in hand however many starts the book has seen. Per run listed: the highest seq ever assigned
(kept after some of its lines are forgotten), the lines still stored, how far the run is projected, the lines pending (not yet projected) and the age of the oldest of
them, and whether a relay stopped projecting the run because the sink refused its lines (at which
seq, when and why: kept in the book until the run projects again); then the number of once keys in the ledger (counted, not loaded) and the sizes of the
database and its WAL. Opens the database read-only: beside a running engine it reads what the
engine has committed, and on a book no engine holds open it leaves the directory exactly as it
found it (no -wal, no -shm), so it also works where you cannot write.

With --watch DURATION it redraws the table every DURATION until interrupted (on a terminal; one
block per refresh otherwise).`

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("stats", "outbox stats --db FILE [--json] [--watch DURATION]", statsAbout)
	dbPath := fs.String("db", "", "the database `file`")
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Duration("watch", 0, "refresh every `duration` (such as 2s) until interrupted")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" {
		return usageError(stderr, "outbox stats", "need --db FILE and no arguments")
	}
	if *watch < 0 || (*watch > 0 && *watch < minWatch) {
		return usageError(stderr, "outbox stats", "--watch must be at least %v: each redraw reads the whole book", minWatch)
	}
	s, err := openReadOnly(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "stats", err)
	}
	defer s.Close()
	if *watch == 0 {
		if err := streamStats(ctx, stdout, s, *asJSON, time.Now()); err != nil {
			return failErr(stderr, exitUsage, "stats", err)
		}
		return exitOK
	}
	return watchStats(ctx, s, *watch, *asJSON, stdout, stderr)
}

// minWatch bounds how often --watch reads the book: a redraw reads every run, and a loop without a
// pause would keep a core and the book's read connection busy beside the engine.
const minWatch = 10 * time.Millisecond

// watchStats prints the report every interval until ctx ends: redrawn in place on a terminal, one
// block after another elsewhere.
func watchStats(ctx context.Context, s *outbox.Store, interval time.Duration, asJSON bool, stdout, stderr io.Writer) int {
	tty := isTerminal(stdout) && !asJSON
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		switch {
		case tty:
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear screen
		case !first && !asJSON:
			fmt.Fprintln(stdout)
		}
		err := streamStats(ctx, stdout, s, asJSON, time.Now())
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			return failErr(stderr, exitUsage, "stats", err)
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-t.C:
		}
	}
}

// openReadOnly opens the book at path read-only, after refusing a missing file or a directory with
// a message that says which.
func openReadOnly(ctx context.Context, path string) (*outbox.Store, error) {
	if err := checkFile(path, "database"); err != nil {
		return nil, err
	}
	return outbox.OpenReadOnly(ctx, path)
}

// requireBook refuses, before a command opens path for writing, a database that holds no book:
// an empty file, another program's database or a consumer's inbox, which outbox.Open would turn
// into a book by migrating the outbox's tables into it. It reads path read-only, so the refusal
// leaves the file as it was. Other errors are left to outbox.Open, which says them too (a book of
// an older schema version is migrated there, as an engine's start would).
func requireBook(ctx context.Context, path string) error {
	if err := checkFile(path, "database"); err != nil {
		return err
	}
	s, err := outbox.OpenReadOnly(ctx, path)
	switch {
	case errors.Is(err, litedb.ErrNoTables):
		return fmt.Errorf("database %s holds no book (no outbox tables); nothing was changed", quote(path))
	case err == nil:
		return s.Close()
	}
	return nil
}

// collectStats reads the whole report, every run in memory: for tests and small books. The command
// streams it (streamStats).
func collectStats(ctx context.Context, s *outbox.Store, now time.Time) (statsReport, error) {
	rep, err := statsHeader(ctx, s)
	if err != nil {
		return rep, err
	}
	for r, err := range s.AllRuns(ctx) {
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, statsRow(r, now))
	}
	return rep, nil
}

// statsHeader is the report without its runs: the book's totals, read from a row per run, and the
// files' sizes. A book that appeared between the open and the read is read again (ErrBookOpened).
func statsHeader(ctx context.Context, s *outbox.Store) (statsReport, error) {
	rep := statsReport{DB: s.Path(), DBEscaped: escapedIfInvalid(s.Path()), Runs: []runStatsRow{}}
	tot, err := s.Totals(ctx)
	if errors.Is(err, outbox.ErrBookOpened) {
		tot, err = s.Totals(ctx)
	}
	if err != nil {
		return rep, err
	}
	rep.Ledger, rep.runCount, rep.RunsKnown = tot.LedgerKeys, tot.RunsWithRows, tot.Runs
	rep.FileBytes, rep.WALBytes = fileSize(s.Path()), fileSize(s.Path()+"-wal")
	return rep, nil
}

// streamStats prints the report as it reads it, a page of runs at a time, so that it holds a page,
// not the book's runs: the table is aligned within each page of runs, and the JSON is the same
// document printStats writes.
func streamStats(ctx context.Context, w io.Writer, s *outbox.Store, asJSON bool, now time.Time) error {
	rep, err := statsHeader(ctx, s)
	if err != nil {
		return err
	}
	var page []runStatsRow
	var stopped []runStatsRow
	first := true
	flush := func(last bool) error {
		if asJSON {
			for _, r := range page {
				b, err := jsonText(r)
				if err != nil {
					return err
				}
				sep := ",\n"
				if first {
					sep, first = "\n", false
				}
				text := "    " + strings.ReplaceAll(strings.TrimSuffix(string(b), "\n"), "\n", "\n    ")
				if _, err := io.WriteString(w, sep+text); err != nil {
					return err
				}
			}
			page = page[:0]
			if last {
				end := "]\n}\n"
				if !first {
					end = "\n  ]\n}\n"
				}
				_, err := io.WriteString(w, end)
				return err
			}
			return nil
		}
		if err := printRunsTable(w, page); err != nil {
			return err
		}
		page = page[:0]
		if last {
			printStops(w, stopped)
		}
		return nil
	}
	if asJSON {
		head, err := jsonText(rep)
		if err != nil {
			return err
		}
		// The header's empty list of runs, opened for the rows that follow.
		text, ok := strings.CutSuffix(string(head), "[]\n}\n")
		if !ok {
			return fmt.Errorf("stats: unexpected JSON header %q", head)
		}
		if _, err := io.WriteString(w, text+"["); err != nil {
			return err
		}
	} else {
		printStatsHeader(w, rep)
	}
	for r, err := range s.AllRuns(ctx) {
		if err != nil {
			return err
		}
		row := statsRow(r, now)
		page = append(page, row)
		if row.Stopped != nil && len(stopped) < maxStopsShown {
			stopped = append(stopped, row)
		}
		if len(page) == statsPage {
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	return flush(true)
}

// statsPage is how many runs stats holds and aligns at a time; maxStopsShown bounds the stopped runs
// whose reasons it prints after the table (the table marks every one).
const (
	statsPage     = 512
	maxStopsShown = 100
)

func statsRow(r outbox.RunStats, now time.Time) runStatsRow {
	row := runStatsRow{RunID: r.RunID, RunEscaped: escapedIfInvalid(r.RunID), LastSeq: r.LastSeq, Lines: r.Lines, LedgerLines: r.LedgerLines,
		Buffered: r.Lines - r.LedgerLines, Projected: r.Projected, Pending: r.Pending}
	if !r.OldestPending.IsZero() && row.Pending > 0 {
		// Never negative: the line's time is the engine's clock at enqueue, and a clock that has
		// stepped back since would otherwise give an age below zero.
		age := max(0, now.Sub(r.OldestPending).Seconds())
		row.OldestAge = &age
	}
	if r.StoppedSeq > 0 {
		row.Stopped = &stopRow{Seq: r.StoppedSeq, Reason: r.StoppedReason, At: r.StoppedAt.UTC()}
	}
	return row
}

func escapedIfInvalid(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return strconv.Quote(s)
}

func fileSize(path string) int64 {
	if st, err := os.Stat(path); err == nil {
		return st.Size()
	}
	return 0
}

func printStats(w io.Writer, rep statsReport, asJSON bool) error {
	if asJSON {
		return printJSON(w, rep)
	}
	rep.runCount = int64(len(rep.Runs))
	printStatsHeader(w, rep)
	if err := printRunsTable(w, rep.Runs); err != nil {
		return err
	}
	var stopped []runStatsRow
	for _, r := range rep.Runs {
		if r.Stopped != nil {
			stopped = append(stopped, r)
		}
	}
	printStops(w, stopped)
	return nil
}

func printStatsHeader(w io.Writer, rep statsReport) {
	fmt.Fprintf(w, "%s: %s, WAL %s; %s in the ledger; %s\n",
		quote(rep.DB), plural(rep.FileBytes, "byte"), plural(rep.WALBytes, "byte"), plural(rep.Ledger, "once key"), plural(max(rep.RunsKnown, rep.runCount), "run"))
	if forgotten := rep.RunsKnown - rep.runCount; forgotten > 0 {
		fmt.Fprintf(w, "listed: the %d with lines stored; %d whose lines are all forgotten are counted, not listed\n", rep.runCount, forgotten)
	}
	fmt.Fprintln(w)
}

func printRunsTable(w io.Writer, runs []runStatsRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\thighest seq\tlines stored\tprojected up to\tpending\toldest pending\tstopped at seq\t")
	for _, r := range runs {
		age := "-"
		if r.OldestAge != nil {
			age = time.Duration(*r.OldestAge * float64(time.Second)).Round(time.Millisecond).String()
		}
		stopped := "-"
		if r.Stopped != nil {
			stopped = strconv.FormatInt(r.Stopped.Seq, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", quote(r.RunID), r.LastSeq, r.Lines, r.Projected, r.Pending, age, stopped)
	}
	return tw.Flush()
}

func printStops(w io.Writer, stopped []runStatsRow) {
	for _, r := range stopped {
		fmt.Fprintf(w, "\nrun %s stopped at seq %d (%s): the sink refuses it: %s\n", quote(r.RunID), r.Stopped.Seq,
			r.Stopped.At.Format(time.RFC3339), sanitize(r.Stopped.Reason))
	}
}

func isTerminal(w io.Writer) bool {
	if s, ok := w.(*streams); ok {
		w = s.Writer
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
