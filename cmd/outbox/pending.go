// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["pending"] = command{
		summary: "print a run's lines not yet projected (or, with --all, every stored line; read-only)",
		run:     runPending,
	}
}

const pendingAbout = `
Prints the run's lines that are not yet projected, in seq order, one per line: those above the
run's projected position (and above --after N when that is higher). With --all, every line still
stored above --after N, projected or not.

A line is printed as stored when every byte of it is printable; a line holding a control byte, DEL
or invalid UTF-8 is printed quoted and escaped (Go's %q), so that it cannot act on a terminal.
--raw prints every line byte for byte as stored. Opens the database read-only.`

func runPending(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("pending", "outbox pending --db FILE --run ID [--all] [--after SEQ] [--limit N] [--raw]", pendingAbout)
	dbPath := fs.String("db", "", "the database `file`")
	runID := fs.String("run", "", "the run's `id`")
	all := fs.Bool("all", false, "every stored line, projected or not")
	after := fs.Int64("after", 0, "only lines with a seq above `seq`")
	limit := fs.Int("limit", 100, "print at most `n` lines")
	raw := fs.Bool("raw", false, "print the lines byte for byte, unescaped")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *runID == "" {
		return usageError(stderr, "outbox pending", "need --db FILE and --run ID")
	}
	if *limit < 1 {
		return usageError(stderr, "outbox pending", "--limit must be at least 1")
	}
	s, err := openReadOnly(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "pending", err)
	}
	defer s.Close()
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
