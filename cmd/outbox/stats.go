// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

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
	DBEscaped string        `json:"db_escaped,omitempty"`
	FileBytes int64         `json:"file_bytes"`
	WALBytes  int64         `json:"wal_bytes"`
	Ledger    int64         `json:"ledger_keys"`
	Runs      []runStatsRow `json:"runs"`
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
Per run: the highest seq ever assigned (kept after its lines are forgotten), the lines still
stored, how far the run is projected, the lines pending (not yet projected) and the age of the oldest of
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
		rep, err := collectStats(ctx, s, time.Now())
		if err != nil {
			return failErr(stderr, exitUsage, "stats", err)
		}
		if err := printStats(stdout, rep, *asJSON); err != nil {
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
		rep, err := collectStats(ctx, s, time.Now())
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			return failErr(stderr, exitUsage, "stats", err)
		}
		switch {
		case tty:
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear screen
		case !first && !asJSON:
			fmt.Fprintln(stdout)
		}
		if err := printStats(stdout, rep, asJSON); err != nil {
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
	case errors.Is(err, outbox.ErrNoSchema):
		return fmt.Errorf("database %s holds no book (no outbox tables); nothing was changed", quote(path))
	case err == nil:
		return s.Close()
	}
	return nil
}

// collectStats reads the report; a read that met an engine opening the book is read again, through
// the engine's WAL.
func collectStats(ctx context.Context, s *outbox.Store, now time.Time) (statsReport, error) {
	rep, err := readStats(ctx, s, now)
	if errors.Is(err, outbox.ErrBookOpened) {
		rep, err = readStats(ctx, s, now)
	}
	return rep, err
}

func readStats(ctx context.Context, s *outbox.Store, now time.Time) (statsReport, error) {
	rep := statsReport{DB: s.Path(), DBEscaped: escapedIfInvalid(s.Path()), Runs: []runStatsRow{}}
	for r, err := range s.AllRuns(ctx) {
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, statsRow(r, now))
	}
	var err error
	if rep.Ledger, err = s.LedgerSize(ctx); err != nil {
		return rep, err
	}
	rep.FileBytes, rep.WALBytes = fileSize(s.Path()), fileSize(s.Path()+"-wal")
	return rep, nil
}

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
	fmt.Fprintf(w, "%s: %s, WAL %s; %s in the ledger; %s\n\n",
		quote(rep.DB), plural(rep.FileBytes, "byte"), plural(rep.WALBytes, "byte"), plural(rep.Ledger, "once key"), plural(int64(len(rep.Runs)), "run"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\thighest seq\tlines stored\tprojected up to\tpending\toldest pending\tstopped at seq\t")
	for _, r := range rep.Runs {
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
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Runs {
		if r.Stopped != nil {
			fmt.Fprintf(w, "\nrun %s stopped at seq %d (%s): the sink refuses it: %s\n", quote(r.RunID), r.Stopped.Seq,
				r.Stopped.At.Format(time.RFC3339), sanitize(r.Stopped.Reason))
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (a command's standard error counts as its own).
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
