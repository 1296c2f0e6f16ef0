package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

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
	DB        string        `json:"db"`
	FileBytes int64         `json:"file_bytes"`
	WALBytes  int64         `json:"wal_bytes"`
	Ledger    int           `json:"ledger_keys"`
	Runs      []runStatsRow `json:"runs"`
}

type runStatsRow struct {
	RunID       string   `json:"run"`
	Lines       int64    `json:"lines"`
	LedgerLines int64    `json:"ledger_lines"`
	Buffered    int64    `json:"buffered"`
	LastSeq     int64    `json:"last_seq"`
	Projected   int64    `json:"projected"`
	Pending     int64    `json:"pending"`
	OldestAge   *float64 `json:"oldest_pending_age_seconds"` // null when nothing is pending or the age is unknown
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox stats", flag.ContinueOnError)
	dbPath := fs.String("db", "", "the database `file`")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: outbox stats --db FILE [--json]\n\nPer run: lines stored, buffered (not in the ledger), highest seq, projected up to,\nthe age of the oldest line not yet projected; the ledger's size; the file's size.\nOpens the database read-only and writes nothing to it.\n\nflags:")
		fs.PrintDefaults()
	}
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" {
		return usageError(stderr, "outbox stats", "need --db FILE and no arguments")
	}
	s, err := outbox.OpenReadOnly(ctx, *dbPath)
	if err != nil {
		return fail(stderr, exitUsage, "stats: %v", err)
	}
	defer s.Close()
	runs, err := s.Runs(ctx)
	if err != nil {
		return fail(stderr, exitUsage, "stats: %v", err)
	}
	ledger, err := s.AnnouncedOnceKeys(ctx)
	if err != nil {
		return fail(stderr, exitUsage, "stats: %v", err)
	}
	rep := statsReport{DB: *dbPath, Ledger: len(ledger), Runs: []runStatsRow{}}
	if st, err := os.Stat(*dbPath); err == nil {
		rep.FileBytes = st.Size()
	}
	if st, err := os.Stat(*dbPath + "-wal"); err == nil {
		rep.WALBytes = st.Size()
	}
	now := time.Now()
	for _, r := range runs {
		rs := runStatsRow{RunID: r.RunID, Lines: r.Lines, LedgerLines: r.LedgerLines, Buffered: r.Lines - r.LedgerLines,
			LastSeq: r.LastSeq, Projected: r.Projected, Pending: max(0, r.LastSeq-r.Projected)}
		if !r.OldestPending.IsZero() && rs.Pending > 0 {
			age := now.Sub(r.OldestPending).Seconds()
			rs.OldestAge = &age
		}
		rep.Runs = append(rep.Runs, rs)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(stderr, exitUsage, "stats: %v", err)
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "%s: %d bytes (WAL %d), %d once keys in the ledger, %d runs\n\n",
		rep.DB, rep.FileBytes, rep.WALBytes, rep.Ledger, len(rep.Runs))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tlines\tbuffered\tlast seq\tprojected\tpending\toldest pending\t")
	for _, r := range rep.Runs {
		age := "-"
		if r.OldestAge != nil {
			age = time.Duration(*r.OldestAge * float64(time.Second)).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.RunID, r.Lines, r.Buffered, r.LastSeq, r.Projected, r.Pending, age)
	}
	tw.Flush()
	return exitOK
}
