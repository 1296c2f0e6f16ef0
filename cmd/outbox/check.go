// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
)

func init() {
	commands["check"] = command{
		summary: "cross-check a book and its journal: lines either lacks, lines that differ (read-only)",
		run:     runCheck,
	}
}

const checkAbout = `
Cross-checks a book against its journal (a journal directory, its segments read in order as one
journal; one segment or a single-file journal; standard input with --journal -, as verify -
reads it; or a JetStream stream with --nats and --stream) and reports what one says and the other
does not:

  - lines the book records as projected that the journal lacks: for every run the book knows,
    including runs whose lines it has forgotten, the journal must hold seqs 1 up to the run's
    projected position;
  - runs and lines the journal holds that the book does not know: a run the book has no record
    of, or seqs beyond the highest the book ever gave the run. A book restored from a backup older
    than the journal shows so (see docs/OPERATING.md on backing a book up);
  - lines that differ: a line the book still stores and the journal holds under the same run and
    seq, with other bytes.

It also names what breaks the journal's own rules as it reads (a malformed line, a run that skips
seqs; up to 10 of them); outbox verify checks the journal fully, duplicates included. A message
of a stream that is not one journal line, or not its subject's run's, ends the read of the stream
and is named.

It writes nothing and creates no file: the book is opened read-only, as stats opens it; the
journal is only read (no lock but a reader's shared one on the segment it reads, which retention
respects; a torn last line is left where it is and not counted). The book's per-run figures are
read first, then the journal, a line at a time, each line compared with the book's stored row of
its run and seq, read a page of a run's rows at a time as the journal reaches them. Memory is held
per run (a few hundred bytes, and pages of stored rows for the 64 runs met last), never per line
or per stored row, whatever the journal's and the book's size. Beside a running engine, what the
journal holds beyond the book's first read, and a line that differs (an engine may have retired
it and projected its tombstone meanwhile), is looked up again in the book before it is reported,
so an engine that goes on enqueueing, retiring and projecting meanwhile causes no finding. A
once-keyed line the relay has projected is kept in the book as its digest only (the first 8 bytes
of its SHA-256), and compared by it; one whose digest a rollback of the schema dropped is not
compared.

A journal directory whose first segments retention removed begins mid-way: a run may begin there
at any seq, and a run the book knows that it does not hold at all is not reported missing (its
lines may have gone with those segments). A sealed segment that ends within a line, or does not
end where the next one begins, is the journal's problem, named with its segment.

A journal that several books write to (a stream shared by engines of different books) holds runs
this book does not know, and check reports them.

The journal's lines are counted as verify counts them: unique lines (once per run and seq) and
lines in all (repeats included).

Prints each finding on a line of its own, then a last line "OK" or "FAILED: " and how many. With
--json it prints one JSON object whatever happens; when the input could not be read, its "error"
member says why.

Exit status: 0 consistent, 1 any finding, 2 a usage or I/O error.`

// checkReport is the --json output, one object on every outcome. Field names are part of the
// command's interface.
type checkReport struct {
	DB      string `json:"db"`
	Journal string `json:"journal,omitempty"` // the journal file, or
	// DBEscaped and JournalEscaped are the paths quoted as Go's %q does, each given only when the
	// path is not valid UTF-8.
	DBEscaped      string `json:"db_escaped,omitempty"`
	JournalEscaped string `json:"journal_escaped,omitempty"`
	Stream         string `json:"stream,omitempty"` // the stream
	Server         string `json:"server,omitempty"` // on this server (its user information hidden)
	OK             bool   `json:"ok"`
	BookRuns       int    `json:"book_runs"` // runs the book knows: with rows, projected, or forgotten
	// JournalRuns and JournalLines count the journal's runs and complete lines, duplicates included;
	// JournalUniqueLines counts its lines once per (run, seq), as verify's "lines" does.
	JournalRuns        int   `json:"journal_runs"`
	JournalLines       int64 `json:"journal_lines"`
	JournalUniqueLines int64 `json:"journal_unique_lines"`
	Compared           int64 `json:"compared_lines"` // journal lines compared with a line the book stores
	TornTail           bool  `json:"torn_tail"`
	// JournalStart is the position a journal directory begins at: not 0 when retention removed its
	// first segments. Runs the book knows that it does not hold are then not checked.
	JournalStart int64          `json:"journal_start,omitempty"`
	Findings     []checkFinding `json:"findings"`
	Error        string         `json:"error,omitempty"` // set when the input could not be read
}

// checkFinding is one finding. Kind is one of the checkKinds.
type checkFinding struct {
	Kind string `json:"kind"`
	Run  string `json:"run,omitempty"`
	// RunEscaped is the run id quoted as Go's %q does, given only when it is not valid UTF-8.
	RunEscaped string `json:"run_escaped,omitempty"`
	FromSeq    int64  `json:"from_seq,omitempty"`
	ToSeq      int64  `json:"to_seq,omitempty"`
	Lines      int64  `json:"lines,omitempty"` // differ: how many lines differ; unknown_run: the run's lines
	Line       int64  `json:"line,omitempty"`  // the journal line it was found at (the first, for differ)
	// Segment names, in a journal directory, the segment of Line and its line there.
	Segment string `json:"segment,omitempty"`
	Message string `json:"message"`
}

// checkKinds are the findings' kinds, in the order they are listed.
var checkKinds = []string{"journal", "missing", "unknown_run", "unknown_lines", "differ"}

// maxJournalProblems bounds the findings of the journal's own rules: a file that is not a journal
// at all would give one per line.
const maxJournalProblems = 10

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", "outbox check --db FILE (--journal JOURNAL | --journal - | (--nats URL | --context NAME) --stream NAME) [--json]", checkAbout)
	dbPath := fs.String("db", "", "the book's database `file`")
	jPath := fs.String("journal", "", "the journal: a `directory` of segments, or a file (- for standard input)")
	streamName := fs.String("stream", "", "the JetStream stream's `name` (with --nats or --context)")
	nf := addNATSFlags(fs, "check against a stream on the NATS server at `url` instead of a file")
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	fileMode := *jPath != "" && !nf.chosen() && *streamName == ""
	streamMode := *jPath == "" && nf.chosen() && *streamName != ""
	if len(pos) != 0 || *dbPath == "" || (!fileMode && !streamMode) {
		return usageError(stderr, "outbox check", "need --db FILE and either --journal JOURNAL or --nats URL (or --context NAME) --stream NAME")
	}
	if p := nf.problem(); p != "" {
		return usageError(stderr, "outbox check", "%s", p)
	}
	rep := checkReport{DB: redact(*dbPath), Journal: redact(*jPath), Stream: *streamName, Findings: []checkFinding{}}
	rep.DBEscaped, rep.JournalEscaped = escapedIfInvalid(rep.DB), escapedIfInvalid(rep.Journal)
	read := func(c *checker) error { return c.readJournal(ctx, *jPath) }
	if *jPath == "-" {
		read = func(c *checker) error {
			if err := c.readLines(ctx, stdinOf(stderr)); err != nil {
				return fmt.Errorf("read the journal from standard input: %w", err)
			}
			return nil
		}
	}
	if streamMode {
		rep.Server = nf.server()
		read = func(c *checker) error { return c.readStream(ctx, nf, *streamName) }
	}
	err := crossCheck(ctx, *dbPath, read, &rep)
	status := exitOK
	switch {
	case err != nil:
		rep.Error = message(err)
		status = exitUsage
	case len(rep.Findings) > 0:
		status = exitFindings
	}
	rep.OK = status == exitOK
	w := &errWriter{w: stdout}
	if *asJSON {
		printJSON(w, rep)
	} else {
		printCheck(w, rep)
	}
	if err != nil {
		return failErr(stderr, status, "check", err)
	}
	if w.err != nil {
		return failErr(stderr, exitUsage, "check", w.err)
	}
	return status
}

// checked, when set, is given the checker after a check: a test looks at what it held.
var checked func(*checker)

// betweenCheckReads, when set, runs between the read of the book and the read of the journal: a test
// places an engine's work there.
var betweenCheckReads func()

// crossCheck reads the book's per-run figures, then the journal, comparing each journal line with
// the book's stored row as it goes (the rows read a page of a run at a time), then looks up again in
// the book what the journal holds beyond it and the lines that differed, and fills rep. It holds
// memory per run, never per line or per stored row.
func crossCheck(ctx context.Context, dbPath string, read func(*checker) error, rep *checkReport) error {
	// Opening it as a Store refuses what is not a book of this version, as stats does.
	s, err := openReadOnly(ctx, dbPath)
	if err != nil {
		return err
	}
	defer s.Close()
	c := &checker{store: s, runs: map[string]*journalRun{}, pages: map[string]*rowPage{}}
	if err := readAgainIfMet(func() (err error) { c.book, err = readBook(ctx, s); return err }); err != nil {
		return fmt.Errorf("read the book: %w", err)
	}
	if betweenCheckReads != nil {
		betweenCheckReads()
	}
	if err := read(c); err != nil {
		return err
	}
	if c.err != nil { // a read of the book at the journal's last line
		return c.err
	}
	findings, err := c.findings(ctx)
	if err != nil {
		return err
	}
	rep.BookRuns, rep.JournalRuns, rep.JournalLines = len(c.book), len(c.runs), c.lines
	rep.JournalUniqueLines = c.lines - c.repeats
	rep.Compared, rep.TornTail, rep.JournalStart = c.compared, c.torn, c.start
	rep.Findings = append(rep.Findings, findings...) // [] in the JSON when there are none, never null
	if checked != nil {
		checked(c)
	}
	return nil
}

// findings compares what the journal holds with the book, looking up again in the book each run the
// journal holds more of than the first read showed, and each line that differed from it: an engine
// that enqueued, retired and projected meanwhile is not a finding.
func (c *checker) findings(ctx context.Context) ([]checkFinding, error) {
	out := slices.Clone(c.problems)
	if c.more > 0 {
		out = append(out, checkFinding{Kind: "journal", Message: fmt.Sprintf("and %s more in the journal (outbox verify names them)", counted(int64(c.more), "problem"))})
	}
	for id, b := range c.book {
		have := int64(0)
		r := c.runs[id]
		if r != nil {
			have = r.last
		} else if c.start > 0 {
			continue // its lines may all lie in the segments retention removed
		}
		if b.projected > have {
			out = append(out, checkFinding{Kind: "missing", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: have + 1, ToSeq: b.projected,
				Message: fmt.Sprintf("run %s: the journal lacks %s, which the book records as projected", quote(id), seqs(have+1, b.projected))})
		}
	}
	var differ map[string][]differLine
	if err := readAgainIfMet(func() (err error) { differ, err = c.stillDiffer(ctx); return err }); err != nil {
		return nil, fmt.Errorf("read the book again: %w", err)
	}
	for id, lines := range differ {
		f := checkFinding{Kind: "differ", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: lines[0].seq, ToSeq: lines[0].seq,
			Lines: int64(len(lines)), Line: lines[0].line, Segment: lines[0].at}
		for _, l := range lines {
			f.FromSeq, f.ToSeq = min(f.FromSeq, l.seq), max(f.ToSeq, l.seq)
		}
		where := fmt.Sprintf("journal line %d", f.Line)
		if f.Segment != "" {
			where += ", " + f.Segment
		}
		f.Message = fmt.Sprintf("run %s: %s differs between the book and the journal (%s)", quote(id), seqs(f.FromSeq, f.FromSeq), where)
		if f.Lines > 1 {
			f.Message += fmt.Sprintf("; %d lines differ, between seqs %d and %d", f.Lines, f.FromSeq, f.ToSeq)
		}
		if more := c.runs[id].differAfter; more > 0 {
			f.Message += fmt.Sprintf("; %d more differed when read, not looked up again", more)
		}
		out = append(out, f)
	}
	var beyond []string // runs the journal holds more of than the book showed
	for id, r := range c.runs {
		if b := c.book[id]; b == nil || r.max > b.last {
			beyond = append(beyond, id)
		}
	}
	var known map[string]int64
	if err := readAgainIfMet(func() (err error) { known, err = c.lastSeqs(ctx, beyond); return err }); err != nil {
		return nil, fmt.Errorf("read the book again: %w", err)
	}
	for _, id := range beyond {
		r := c.runs[id]
		last, ok := known[id]
		var f checkFinding
		switch {
		case !ok:
			f = checkFinding{Kind: "unknown_run", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: 1, ToSeq: r.max, Lines: r.lines,
				Message: fmt.Sprintf("run %s: the journal holds %s of a run the book does not know", quote(id), seqs(1, r.max))}
		case r.max > last:
			f = checkFinding{Kind: "unknown_lines", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: last + 1, ToSeq: r.max,
				Message: fmt.Sprintf("run %s: the journal holds %s, beyond the highest seq the book gave the run (%d)", quote(id), seqs(last+1, r.max), last)}
		default:
			continue
		}
		if r.beyondAt != "" {
			// In a journal directory, where the journal first held more than the book's first read.
			f.Line, f.Segment = r.beyond, r.beyondAt
			f.Message += fmt.Sprintf(" (from journal line %d, %s)", r.beyond, r.beyondAt)
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b checkFinding) int {
		return cmp.Or(cmp.Compare(slices.Index(checkKinds, a.Kind), slices.Index(checkKinds, b.Kind)),
			cmp.Compare(a.Run, b.Run), cmp.Compare(a.Line, b.Line), cmp.Compare(a.FromSeq, b.FromSeq))
	})
	return out, nil
}

// seqs names a range of seqs.
func seqs(from, to int64) string {
	if from == to {
		return fmt.Sprintf("seq %d", from)
	}
	return fmt.Sprintf("seqs %d to %d", from, to)
}

// printCheck prints what was read, each finding, and the verdict as the last line.
func printCheck(w io.Writer, rep checkReport) {
	journalName := quote(rep.Journal)
	if rep.Stream != "" {
		journalName = "stream " + quote(rep.Stream) + " at " + quote(rep.Server)
	}
	if rep.Error == "" {
		fmt.Fprintf(w, "book %s: %s; journal %s: %s, %s", quote(rep.DB), counted(int64(rep.BookRuns), "run"), journalName,
			counted(int64(rep.JournalRuns), "run"), lineCounts(rep.JournalUniqueLines, rep.JournalLines))
		if rep.TornTail {
			fmt.Fprint(w, ", torn last line (not read)")
		}
		fmt.Fprintf(w, "; %s compared byte for byte\n", counted(rep.Compared, "stored line"))
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(w, f.Message)
	}
	switch {
	case rep.Error != "":
		fmt.Fprintf(w, "FAILED: %s\n", rep.Error)
	case len(rep.Findings) > 0:
		fmt.Fprintf(w, "FAILED: %s\n", counted(int64(len(rep.Findings)), "finding"))
	default:
		fmt.Fprintln(w, "OK")
	}
}

// lineCounts says how many lines a journal holds the one way verify and check both say it: once
// per (run, seq), and in all, repeats included.
func lineCounts(unique, total int64) string {
	return fmt.Sprintf("%s, %d in all", counted(unique, "unique line"), total)
}

// counted is n and the noun, agreeing in number: "1 run", "2 runs".
func counted(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
