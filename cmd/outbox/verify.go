// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	ojs "github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["verify"] = command{
		summary: "check a journal: no gap, no conflicting re-delivery, every line well formed",
		run:     runVerify,
	}
}

// verifyReport is the --json output, one object on every outcome. Field names are part of the
// command's interface.
type verifyReport struct {
	File string `json:"file,omitempty"` // the journal checked: a directory, a file, "-" (standard input)
	// FileEscaped is the path quoted as Go's %q does, given only when it is not valid UTF-8.
	FileEscaped string               `json:"file_escaped,omitempty"`
	Stream      string               `json:"stream,omitempty"` // or the stream checked,
	Server      string               `json:"server,omitempty"` // on this server (user information hidden)
	OK          bool                 `json:"ok"`
	Lines       int                  `json:"lines"` // unique lines: once per (run, seq)
	Duplicates  int                  `json:"duplicates"`
	Unchecked   int                  `json:"unchecked"`   // duplicates older than the repeat window, not compared
	Start       int64                `json:"start"`       // a trimmed directory's first position
	TotalLines  int                  `json:"total_lines"` // lines in all: Lines + Duplicates
	TornTail    bool                 `json:"torn_tail"`
	Runs        map[string]verifyRun `json:"runs"`
	Finding     *verifyFinding       `json:"finding"`         // null when clean
	Error       string               `json:"error,omitempty"` // set when the input could not be read
}

type verifyRun struct {
	Last       int64 `json:"last_seq"`
	Lines      int   `json:"lines"`
	Duplicates int   `json:"duplicates"`
	Unchecked  int   `json:"unchecked"`
	First      int64 `json:"first_seq,omitempty"` // in a part of a journal, where the run begins
}

type verifyFinding struct {
	Kind string `json:"kind"` // "gap", "conflict" or "malformed"
	Line int    `json:"line"`
	// Segment and SegmentLine locate the line in a journal directory: its segment file and its line
	// there.
	Segment     string `json:"segment,omitempty"`
	SegmentLine int    `json:"segment_line,omitempty"`
	Run         string `json:"run,omitempty"`
	Seq         int64  `json:"seq,omitempty"`
	Expected    int64  `json:"expected,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message"`
}

const verifyAbout = `
Checks a journal the way its reader does: each run's seqs go 1, 2, 3, ...; a repeated seq
carries the same bytes (a duplicate, skipped) or is a conflict; every complete line is a JSON
object with a string "engine_run_id" and an integer "seq". A last line without its newline is a
torn tail, reported, not an error.

JOURNAL is a journal directory (its segments read in order, as one journal; a finding names its
segment and its line there), one segment or a single-file journal; - reads the journal from
standard input. A directory whose first segments retention removed, or a segment after the
first, begins mid-way: its runs may begin at any seq.

Memory stays bounded whatever the journal's length: a repeat is compared with its first copy (by
a 64-bit hash under a seed chosen at random) when it repeats one of its run's last 512 seqs, what a
relay re-sends after a crash (two batches); an older repeat has its key checked and is counted as
unchecked, not compared.

With --nats URL or --context NAME it checks the stream NAME instead, read from its first message to
its last, every message's subject under --subject-prefix.

Prints a per-run summary, the journal's lines counted as check counts them (unique lines, once
per run and seq, and lines in all, repeats included), and ends with a one-line verdict, "OK" or
"FAILED: " and what failed.
With --json it prints one JSON object whatever happens: "file" names the journal checked, or
"stream" and "server" the stream (the server's user information hidden); when the input could not
be read, its "error" member says why.

Exit status: 0 clean, 1 a gap, a conflict or a malformed line, 2 a usage or I/O error.`

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", "outbox verify [--json] (JOURNAL | - | (--nats URL | --context NAME) --stream NAME)", verifyAbout)
	asJSON := fs.Bool("json", false, "print one JSON object")
	streamName := fs.String("stream", "", "the JetStream stream's `name` (with --nats or --context)")
	nf := addNATSFlags(fs, "check a stream on the NATS server at `url` instead of a file")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	var out verifyReport
	var check func() (journal.Report, error)
	switch {
	case nf.chosen() && *streamName != "" && len(pos) == 0:
		out.Stream = *streamName
		check = func() (journal.Report, error) {
			js, closeConn, err := nf.connect()
			if err != nil {
				return journal.Report{}, err
			}
			defer closeConn()
			return ojs.Verify(ctx, js, *streamName, ojs.WithSubjectPrefix(nf.prefix))
		}
	case !nf.chosen() && *streamName == "" && len(pos) == 1 && pos[0] == "-":
		out.File = "-"
		check = func() (journal.Report, error) { return journal.Verify(stdinOf(stderr)) }
	case !nf.chosen() && *streamName == "" && len(pos) == 1:
		out.File = redact(pos[0])
		out.FileEscaped = escapedIfInvalid(out.File)
		check = func() (journal.Report, error) { return verifyPath(ctx, pos[0]) }
	default:
		return usageError(stderr, "outbox verify", "need exactly one JOURNAL, a directory or a file (- for standard input), or --nats URL (or --context NAME) --stream NAME")
	}
	if p := nf.problem(); p != "" {
		return usageError(stderr, "outbox verify", "%s", p)
	}
	rep, verr := check()
	if out.Stream != "" {
		out.Server = nf.server()
	}
	out.OK, out.Lines, out.Duplicates, out.TornTail, out.Runs = verr == nil, rep.Lines, rep.Duplicates, rep.TornTail, map[string]verifyRun{}
	out.Unchecked, out.Start = rep.Unchecked, rep.Start
	out.TotalLines = rep.Lines + rep.Duplicates
	for id, r := range rep.Runs {
		out.Runs[id] = verifyRun{Last: r.Last, Lines: r.Lines, Duplicates: r.Duplicates, Unchecked: r.Unchecked, First: r.First}
	}
	status := exitOK
	var finding *journal.Error
	switch {
	case errors.As(verr, &finding):
		kind := map[error]string{journal.ErrStreamGap: "gap", journal.ErrPayloadConflict: "conflict", journal.ErrMalformed: "malformed"}[finding.Err]
		out.Finding = &verifyFinding{Kind: kind, Line: finding.Line, Segment: finding.Segment, SegmentLine: finding.SegmentLine, Run: finding.Run, Seq: finding.Seq,
			Expected: finding.Expected, Reason: finding.Reason, Message: message(finding)}
		status = exitFindings
	case verr != nil:
		out.Error = message(verr)
		status = exitUsage
	}
	w := &errWriter{w: stdout}
	if *asJSON {
		printJSON(w, out)
	} else {
		printVerify(w, out)
	}
	if verr != nil {
		return failErr(stderr, status, "verify", verr)
	}
	if w.err != nil {
		return failErr(stderr, exitUsage, "verify", w.err)
	}
	return status
}

// verifyPath verifies the journal at path: a journal directory, or one file (a single-file journal or
// a segment; a segment after the first begins mid-way), refusing a missing one by name.
func verifyPath(ctx context.Context, path string) (journal.Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return journal.VerifyDir(ctx, path)
	}
	if err := checkFile(path, "journal"); err != nil {
		return journal.Report{}, err
	}
	// Opening a named pipe would wait for a writer: refuse it, as anything else not a file, first.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return journal.Report{}, fmt.Errorf("journal %s is not a regular file", quote(path))
	}
	f, err := os.Open(path)
	if err != nil {
		return journal.Report{}, err
	}
	defer f.Close()
	if err := beginsAJournal(f, path); err != nil {
		return journal.Report{}, err
	}
	return journal.Verify(f, segmentOptions(path)...)
}

// beginsAJournal refuses, wrapping journal.ErrNotJournal, a file whose first line is not a journal
// line: a database or a log named for the journal is a usage error (exit 2), as check and relay say,
// not a journal with a malformed line (exit 1), so that a script tells a wrong file from a corrupt
// journal. Only the beginning is judged: a journal's later lines, its tail above all (a crash may
// leave NUL bytes there), are what verify is for. A file with no newline within a line's length
// (a torn line alone) is left to Verify.
func beginsAJournal(f *os.File, path string) error {
	buf := make([]byte, outbox.DefaultMaxLineSize+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	buf = buf[:n]
	first, _, whole := bytes.Cut(buf, []byte{'\n'})
	var why string
	switch {
	case n == 0:
		return nil
	case first[0] != '{':
		why = "it does not begin with '{'"
	case bytes.IndexByte(first, 0) >= 0:
		why = "a NUL byte in its first line"
	case !whole:
		return nil
	default:
		if _, _, err := journal.LineKey(first); err != nil {
			why = "its first line is not a journal line: " + message(err)
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w: %s: %s", journal.ErrNotJournal, path, why)
}

// segmentOptions are the options that read the file at path as what it is: a segment that does not
// begin a journal (its name is a position other than 0) holds runs from mid-way.
func segmentOptions(path string) []journal.VerifyOption {
	name := filepath.Base(path)
	digits, ok := strings.CutSuffix(name, ".jsonl")
	if !ok || len(digits) != 20 || strings.Trim(digits, "0123456789") != "" || strings.Trim(digits, "0") == "" {
		return nil
	}
	return []journal.VerifyOption{journal.WithPartial()}
}

// printVerify prints the per-run table, the totals, and the verdict as the last line.
func printVerify(w io.Writer, out verifyReport) {
	ids := make([]string, 0, len(out.Runs))
	for id := range out.Runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tlast seq\tlines\tduplicates\t")
		for _, id := range ids {
			r := out.Runs[id]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", quote(id), r.Last, r.Lines, r.Duplicates)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if out.Error == "" {
		fmt.Fprintf(w, "%s, %s, %s skipped", counted(int64(len(ids)), "run"), lineCounts(int64(out.Lines), int64(out.TotalLines)),
			counted(int64(out.Duplicates), "duplicate"))
		if out.Unchecked > 0 {
			fmt.Fprintf(w, " (%d older than the repeat window, key checked, bytes not compared)", out.Unchecked)
		}
		if out.TornTail {
			fmt.Fprint(w, ", torn last line")
		}
		fmt.Fprintln(w)
	}
	switch {
	case out.Finding != nil:
		fmt.Fprintf(w, "FAILED: %s\n", out.Finding.Message)
	case out.Error != "":
		fmt.Fprintf(w, "FAILED: %s\n", out.Error)
	default:
		fmt.Fprintln(w, "OK")
	}
}
