package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["pending"] = command{
		summary: "print a run's stored lines, exactly as stored (read-only)",
		run:     runPending,
	}
}

func runPending(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox pending", flag.ContinueOnError)
	dbPath := fs.String("db", "", "the database `file`")
	runID := fs.String("run", "", "the run `id`")
	after := fs.Int64("after", 0, "print lines with a seq above `N`")
	limit := fs.Int("limit", 100, "print at most `N` lines")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: outbox pending --db FILE --run ID [--after N] [--limit N]\n\nPrints the run's stored lines with seq > N, in seq order, byte for byte as stored,\neach followed by a newline. Opens the database read-only.\n\nflags:")
		fs.PrintDefaults()
	}
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *runID == "" {
		return usageError(stderr, "outbox pending", "need --db FILE and --run ID")
	}
	if *limit < 1 {
		return fail(stderr, exitUsage, "pending: --limit must be at least 1")
	}
	s, err := outbox.OpenReadOnly(ctx, *dbPath)
	if err != nil {
		return fail(stderr, exitUsage, "pending: %v", err)
	}
	defer s.Close()
	w := bufio.NewWriter(stdout)
	for left := *limit; left > 0; {
		lines, err := s.PendingEvents(ctx, *runID, *after, min(left, 1000))
		if err != nil {
			return fail(stderr, exitUsage, "pending: %v", err)
		}
		if len(lines) == 0 {
			break
		}
		for _, l := range lines {
			w.Write(l.Line)
			w.WriteByte('\n')
		}
		*after = lines[len(lines)-1].Seq
		left -= len(lines)
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, exitUsage, "pending: %v", err)
	}
	return exitOK
}
