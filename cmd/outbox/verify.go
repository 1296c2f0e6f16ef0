package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"

	ojs "github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
)

func init() {
	commands["verify"] = command{
		summary: "check a journal: no gap, no conflicting re-delivery, every line well formed",
		run:     runVerify,
	}
}

// verifyReport is the --json output. Field names are part of the command's interface.
type verifyReport struct {
	File       string               `json:"file"`
	OK         bool                 `json:"ok"`
	Lines      int                  `json:"lines"`
	Duplicates int                  `json:"duplicates"`
	TornTail   bool                 `json:"torn_tail"`
	Runs       map[string]verifyRun `json:"runs"`
	Finding    *verifyFinding       `json:"finding"` // null when clean
}

type verifyRun struct {
	Last       int64 `json:"last_seq"`
	Lines      int   `json:"lines"`
	Duplicates int   `json:"duplicates"`
}

type verifyFinding struct {
	Kind     string `json:"kind"` // "gap", "conflict" or "malformed"
	Line     int    `json:"line"`
	Run      string `json:"run,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	Expected int64  `json:"expected,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message"`
}

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox verify", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	natsURL := fs.String("nats", "", "check a stream on the NATS server at `URL` instead of a file")
	streamName := fs.String("stream", "", "the JetStream stream `NAME` (with --nats)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: outbox verify [--json] (FILE | --nats URL --stream NAME)\n\nChecks a journal the way its reader does: each run's seqs go 1, 2, 3, ...; a repeated\nseq carries the same bytes (a duplicate, skipped) or is a conflict; every complete line is a\nJSON object with a string \"engine_run_id\" and an integer \"seq\". A last line without its\nnewline is a torn tail, reported, not an error.\n\nExit status: 0 clean, 1 a gap, a conflict or a malformed line, 2 a usage or I/O error.\n\nflags:")
		fs.PrintDefaults()
	}
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	var rep journal.Report
	var verr error
	var source string
	switch {
	case *natsURL != "" && *streamName != "" && len(pos) == 0:
		js, closeConn, err := connectJetStream(*natsURL)
		if err != nil {
			return fail(stderr, exitUsage, "verify: %v", err)
		}
		defer closeConn()
		source = *streamName + " at " + *natsURL
		rep, verr = ojs.Verify(ctx, js, *streamName)
	case *natsURL == "" && *streamName == "" && len(pos) == 1:
		f, err := os.Open(pos[0])
		if err != nil {
			return fail(stderr, exitUsage, "verify: %v", err)
		}
		defer f.Close()
		source = pos[0]
		rep, verr = journal.Verify(f)
	default:
		return usageError(stderr, "outbox verify", "need exactly one journal FILE, or --nats URL --stream NAME")
	}
	var finding *journal.Error
	if verr != nil && !errors.As(verr, &finding) {
		return fail(stderr, exitUsage, "verify: %v", verr)
	}
	out := verifyReport{File: source, OK: verr == nil, Lines: rep.Lines, Duplicates: rep.Duplicates,
		TornTail: rep.TornTail, Runs: map[string]verifyRun{}}
	for id, r := range rep.Runs {
		out.Runs[id] = verifyRun{Last: r.Last, Lines: r.Lines, Duplicates: r.Duplicates}
	}
	if finding != nil {
		kind := map[error]string{journal.ErrStreamGap: "gap", journal.ErrPayloadConflict: "conflict", journal.ErrMalformed: "malformed"}[finding.Err]
		out.Finding = &verifyFinding{Kind: kind, Line: finding.Line, Run: finding.Run, Seq: finding.Seq,
			Expected: finding.Expected, Reason: finding.Reason, Message: finding.Error()}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	} else {
		ids := make([]string, 0, len(out.Runs))
		for id := range out.Runs {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tlast seq\tlines\tduplicates\t")
		for _, id := range ids {
			r := out.Runs[id]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", id, r.Last, r.Lines, r.Duplicates)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "\n%d runs, %d lines, %d duplicates skipped", len(ids), out.Lines, out.Duplicates)
		if out.TornTail {
			fmt.Fprint(stdout, ", torn last line")
		}
		fmt.Fprintln(stdout)
	}
	if finding != nil {
		return fail(stderr, exitFindings, "verify: %v", finding)
	}
	return exitOK
}
