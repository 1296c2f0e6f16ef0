// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["pending"] = command{
		summary: "list the runs with pending lines, or print a run's lines not yet projected (read-only)",
		run:     runPending,
	}
}

const pendingAbout = `
Without --run, lists every run with pending lines (lines not yet projected), in run id order, one
per line, tab-separated under a header: the run, how many lines are pending, the first and the last
pending seq, when the first was enqueued (- when unknown), and the seq a relay stopped at on the
sink's refusal (- when none). The book is read a page of runs at a time, in bounded memory. At most
--limit runs are listed; when more follow, standard error says so and --after-run ID shows them.

With --run ID, prints the run's lines that are not yet projected, in seq order, one per line: those above the
run's projected position (and above --after N when that is higher). With --all, every line still
stored above --after N, projected or not.

A line is printed as stored when every byte of it is printable; a line holding a control byte, DEL
or invalid UTF-8 is printed quoted and escaped (Go's %q), so that it cannot act on a terminal.
--raw prints every line byte for byte as stored. Opens the database read-only.`

func runPending(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("pending", "outbox pending --db FILE [--after-run ID] [--limit N]\n       outbox pending --db FILE --run ID [--all] [--after SEQ] [--limit N] [--raw]", pendingAbout)
	dbPath := fs.String("db", "", "the database `file`")
	runID := fs.String("run", "", "the run's `id` (without it: list the runs with pending lines)")
	all := fs.Bool("all", false, "with --run: every stored line, projected or not")
	after := fs.Int64("after", 0, "with --run: only lines with a seq above `seq`")
	afterRun := fs.String("after-run", "", "without --run: only runs whose id sorts after `id`")
	limit := fs.Int("limit", 100, "print at most `n` lines (with --run) or runs (without)")
	raw := fs.Bool("raw", false, "with --run: print the lines byte for byte, unescaped")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" {
		return usageError(stderr, "outbox pending", "need --db FILE (and --run ID for a run's lines)")
	}
	if *runID == "" && (*all || *after != 0 || *raw) {
		return usageError(stderr, "outbox pending", "--all, --after and --raw go with --run ID")
	}
	if *runID != "" && *afterRun != "" {
		return usageError(stderr, "outbox pending", "--after-run goes without --run")
	}
	if *limit < 1 {
		return usageError(stderr, "outbox pending", "--limit must be at least 1")
	}
	s, err := openReadOnly(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "pending", err)
	}
	defer s.Close()
	if *runID == "" {
		return pendingRuns(ctx, s, stdout, stderr, *afterRun, *limit)
	}
	switch used, err := s.EventsUsed(ctx, *runID); {
	case err != nil:
		return failErr(stderr, exitUsage, "pending", err)
	case !used:
		return fail(stderr, exitFindings, "pending: run %s is not in %s", quote(*runID), quote(*dbPath))
	}
	from := *after
	if !*all {
		projected, err := s.Projected(ctx, *runID)
		if err != nil {
			return failErr(stderr, exitUsage, "pending", err)
		}
		from = max(from, projected)
	}
	w := bufio.NewWriter(stdout)
	last, more, err := printPending(ctx, s, w, *runID, from, *limit, *raw)
	if err != nil {
		return failErr(stderr, exitUsage, "pending", err)
	}
	if err := w.Flush(); err != nil {
		return failErr(stderr, exitUsage, "pending", err)
	}
	if more {
		// On standard error, so that standard output stays the lines alone.
		fmt.Fprintf(stderr, "outbox pending: --limit %d cut the list after seq %d; more lines follow (--after %d shows them)\n", *limit, last, last)
	}
	return exitOK
}

// printPending prints up to limit lines after the seq after, and reports the last seq printed and
// whether the limit left lines unprinted.
func printPending(ctx context.Context, s *outbox.Store, w *bufio.Writer, runID string, after int64, limit int, raw bool) (last int64, more bool, err error) {
	for left := limit; ; {
		lines, err := s.PendingEvents(ctx, runID, after, min(max(left, 1), 1000))
		if err != nil {
			return after, false, err
		}
		if len(lines) == 0 {
			return after, false, nil
		}
		if left == 0 {
			return after, true, nil
		}
		for _, l := range lines {
			if raw || printable(string(l.Line)) {
				w.Write(l.Line)
			} else {
				w.WriteString(strconv.Quote(string(l.Line)))
			}
			w.WriteByte('\n')
		}
		after = lines[len(lines)-1].Seq
		left -= len(lines)
	}
}

// pendingRuns lists the runs with pending lines after the run id after, at most limit of them,
// printing each as it is read: the book is walked a page of runs at a time (Store.AllRuns), so a
// book of millions of runs costs time, not memory.
func pendingRuns(ctx context.Context, s *outbox.Store, stdout, stderr io.Writer, after string, limit int) int {
	w := bufio.NewWriter(stdout)
	listed, last, more := 0, "", false
	for st, err := range s.AllRuns(ctx) {
		if err != nil {
			return failErr(stderr, exitUsage, "pending", err)
		}
		if st.RunID <= after || st.Pending == 0 {
			continue
		}
		if listed == limit {
			more = true
			break
		}
		if listed == 0 {
			fmt.Fprintln(w, "run\tpending\tfirst seq\tlast seq\toldest pending\tstopped at")
		}
		oldest, stopped := "-", "-"
		if !st.OldestPending.IsZero() {
			oldest = st.OldestPending.UTC().Format(time.RFC3339)
		}
		if st.StoppedSeq > 0 {
			stopped = strconv.FormatInt(st.StoppedSeq, 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\n", quote(st.RunID), st.Pending, st.Projected+1, st.LastSeq, oldest, stopped)
		listed++
		last = st.RunID
	}
	if err := w.Flush(); err != nil {
		return failErr(stderr, exitUsage, "pending", err)
	}
	if more {
		fmt.Fprintf(stderr, "outbox pending: --limit %d cut the list after run %s; more runs follow (--after-run %s shows them)\n",
			limit, quote(last), quote(last))
	}
	return exitOK
}
