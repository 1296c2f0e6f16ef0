package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/db"
	ojs "github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["check"] = command{
		summary: "cross-check a book and its journal: lines either lacks, lines that differ (read-only)",
		run:     runCheck,
	}
}

const checkAbout = `
Cross-checks a book against its journal (a file, or a JetStream stream with --nats and --stream)
and reports what one says and the other does not:

  - lines the book records as projected that the journal lacks: for every run the book knows,
    including runs whose lines it has forgotten, the journal must hold seqs 1 up to the run's
    projected position;
  - runs and lines the journal holds that the book does not know: a run the book has no record
    of, or seqs beyond the highest the book ever gave the run. A book restored from a backup older
    than the journal shows so (see the README on backing a book up);
  - lines that differ: a line the book still stores and the journal holds under the same run and
    seq, with other bytes.

It also names what breaks the journal's own rules as it reads (a malformed line, a run that skips
seqs; up to 10 of them); outbox verify checks the journal fully, duplicates included. A message
of a stream that is not one journal line, or not its subject's run's, ends the read of the stream
and is named.

It writes nothing and creates no file: the book is opened read-only, as stats opens it, and read
in one snapshot; the journal file is only read (no lock, and a torn last line is left where it is
and not counted). Beside a running engine the book is read first and the journal after it, and
what the journal holds beyond the book is looked up again in the book before it is reported, so
an engine that goes on enqueueing and projecting meanwhile causes no finding. The book's stored
lines are kept as SHA-256 digests while the journal is read: about 40 bytes a line.

A journal that several books write to (a stream shared by engines of different books) holds runs
this book does not know, and check reports them.

Prints each finding on a line of its own, then a last line "OK" or "FAILED: " and how many. With
--json it prints one JSON object whatever happens; when the input could not be read, its "error"
member says why.

Exit status: 0 consistent, 1 any finding, 2 a usage or I/O error.`

// checkReport is the --json output, one object on every outcome. Field names are part of the
// command's interface.
type checkReport struct {
	DB       string `json:"db"`
	Journal  string `json:"journal,omitempty"` // the journal file, or
	Stream   string `json:"stream,omitempty"`  // the stream
	NATS     string `json:"nats,omitempty"`    // on this server
	OK       bool   `json:"ok"`
	BookRuns int    `json:"book_runs"` // runs the book knows: with rows, projected, or forgotten
	// JournalRuns and JournalLines count the journal's runs and complete lines, duplicates included.
	JournalRuns  int            `json:"journal_runs"`
	JournalLines int64          `json:"journal_lines"`
	Compared     int64          `json:"compared_lines"` // journal lines compared with a line the book stores
	TornTail     bool           `json:"torn_tail"`
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
	Message    string `json:"message"`
}

// checkKinds are the findings' kinds, in the order they are listed.
var checkKinds = []string{"journal", "missing", "unknown_run", "unknown_lines", "differ"}

// maxJournalProblems bounds the findings of the journal's own rules: a file that is not a journal
// at all would give one per line.
const maxJournalProblems = 10

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", "outbox check --db FILE (--journal FILE | --nats URL --stream NAME) [--json]", checkAbout)
	dbPath := fs.String("db", "", "the book's database `file`")
	jPath := fs.String("journal", "", "the journal `file`")
	natsURL := fs.String("nats", "", "check against a stream on the NATS server at `url` instead of a file")
	streamName := fs.String("stream", "", "the JetStream stream's `name` (with --nats)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	fileMode := *jPath != "" && *natsURL == "" && *streamName == ""
	streamMode := *jPath == "" && *natsURL != "" && *streamName != ""
	if len(pos) != 0 || *dbPath == "" || (!fileMode && !streamMode) {
		return usageError(stderr, "outbox check", "need --db FILE and either --journal FILE or --nats URL --stream NAME")
	}
	rep := checkReport{DB: *dbPath, Journal: *jPath, Stream: *streamName, NATS: *natsURL, Findings: []checkFinding{}}
	read := func(c *checker) error { return c.readFile(ctx, *jPath) }
	if streamMode {
		read = func(c *checker) error { return c.readStream(ctx, *natsURL, *streamName) }
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
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printCheck(stdout, rep)
	}
	if err != nil {
		return failErr(stderr, status, "check", err)
	}
	return status
}

// crossCheck reads the book, then the journal, then looks up again in the book what the journal
// holds beyond it, and fills rep.
func crossCheck(ctx context.Context, dbPath string, read func(*checker) error, rep *checkReport) error {
	// Opening it as a Store first refuses what is not a book of this version, as stats does.
	s, err := openReadOnly(ctx, dbPath)
	if err != nil {
		return err
	}
	s.Close()
	d, err := outbox.OpenReadOnlyDB(ctx, dbPath)
	if err != nil {
		return err
	}
	defer d.Close()
	c := &checker{runs: map[string]*journalRun{}}
	if err := readAgainIfMet(func() (err error) { c.book, err = readBook(ctx, d); return err }); err != nil {
		return fmt.Errorf("read the book: %w", err)
	}
	if err := read(c); err != nil {
		return err
	}
	findings, err := c.findings(ctx, d)
	if err != nil {
		return err
	}
	rep.BookRuns, rep.JournalRuns, rep.JournalLines = len(c.book), len(c.runs), c.lines
	rep.Compared, rep.TornTail, rep.Findings = c.compared, c.torn, findings
	return nil
}

// readAgainIfMet runs fn again while it fails having read nothing, as a read-only Store's reads do: it
// met an engine opening the book (ErrBookOpened), or a commit of the engine's through a -shm this
// user cannot write.
func readAgainIfMet(fn func() error) error {
	err := fn()
	for i := 0; i < 100 && (errors.Is(err, outbox.ErrBookOpened) || errors.Is(err, sqlite3.READONLY_RECOVERY) ||
		errors.Is(err, sqlite3.READONLY_CANTINIT)); i++ {
		err = fn()
	}
	return err
}

// bookRun is what the book knows of a run.
type bookRun struct {
	projected int64       // every seq up to this one is in the journal
	last      int64       // the highest seq the run was ever given, forgotten lines included
	rows      []rowDigest // the lines it still stores, in seq order
}

type rowDigest struct {
	seq int64
	sum [sha256.Size]byte
}

// bookPage is how many runs, and how many lines of a run, one query reads.
const bookPage = 512

// readBook reads, in one read transaction, every run the book knows and the digest of every line
// it stores.
func readBook(ctx context.Context, d *sql.DB) (map[string]*bookRun, error) {
	tx, err := d.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	runs := map[string]*bookRun{}
	// The positions of every run ever projected or forgotten, whose lines may all be gone: no
	// shipping query lists them, since the library only ever asks for one run's.
	rows, err := tx.QueryContext(ctx, `SELECT engine_run_id, projected, last_seq FROM outbox_progress`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		r := &bookRun{}
		if err := rows.Scan(&id, &r.projected, &r.last); err != nil {
			rows.Close()
			return nil, err
		}
		runs[id] = r
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	q := db.New()
	for after := ""; ; {
		page, err := q.EventsRuns(ctx, tx, db.EventsRunsParams{AfterRun: after, MaxRuns: bookPage})
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			r := runs[p.EngineRunID]
			if r == nil {
				r = &bookRun{}
				runs[p.EngineRunID] = r
			}
			r.projected, r.last = max(r.projected, p.Projected), max(r.last, p.LastSeq, p.ForgottenLastSeq)
			if r.rows, err = readRows(ctx, q, tx, p.EngineRunID); err != nil {
				return nil, err
			}
		}
		if len(page) < bookPage {
			return runs, nil
		}
		after = page[len(page)-1].EngineRunID
	}
}

// readRows reads the digests of a run's stored lines, a page at a time, through the relay's own
// query, so a large line is read from where it is stored as the relay reads it.
func readRows(ctx context.Context, q *db.Queries, tx *sql.Tx, runID string) ([]rowDigest, error) {
	var out []rowDigest
	for after := int64(0); ; {
		page, err := q.EventsPending(ctx, tx, db.EventsPendingParams{EngineRunID: runID, AfterSeq: after, MaxRows: bookPage})
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			out = append(out, rowDigest{seq: l.Seq, sum: sha256.Sum256(l.Line)})
			after = l.Seq
		}
		if len(page) < bookPage {
			return out, nil
		}
	}
}

// journalRun is what the journal holds of a run.
type journalRun struct {
	last   int64 // seqs 1..last are all in the journal
	max    int64 // the highest seq seen
	gap    bool  // a seq came after a hole: last stays before it
	lines  int64
	differ *checkFinding
}

// checker holds the book and what reading the journal found.
type checker struct {
	book     map[string]*bookRun
	runs     map[string]*journalRun
	line     int64 // the journal line being read, 1-based
	lines    int64
	compared int64
	torn     bool
	problems []checkFinding // the journal's own
	more     int            // problems beyond maxJournalProblems
}

func (c *checker) problem(f checkFinding) {
	if len(c.problems) == maxJournalProblems {
		c.more++
		return
	}
	f.Kind, f.Line = "journal", c.line
	f.RunEscaped = escapedIfInvalid(f.Run)
	f.Message = fmt.Sprintf("journal line %d: %s", c.line, f.Message)
	c.problems = append(c.problems, f)
}

// add takes one complete journal line (without its newline); tooLong is its length when it is
// longer than a journal line may be, and line is then nil.
func (c *checker) add(line []byte, tooLong int64) {
	c.line++
	if tooLong > 0 {
		c.problem(checkFinding{Message: fmt.Sprintf("a line of %d bytes, longer than the limit of %d", tooLong, outbox.DefaultMaxLineSize)})
		return
	}
	run, seq, err := journal.LineKey(line)
	if err != nil {
		c.problem(checkFinding{Message: message(err)})
		return
	}
	c.lines++
	r := c.runs[run]
	if r == nil {
		r = &journalRun{}
		c.runs[run] = r
	}
	r.lines++
	switch {
	case r.gap || seq <= r.last:
	case seq == r.last+1:
		r.last = seq
	default:
		r.gap = true
		c.problem(checkFinding{Run: run, FromSeq: r.last + 1, ToSeq: seq - 1,
			Message: fmt.Sprintf("run %s skips from seq %d to %d", quote(run), r.last, seq)})
	}
	r.max = max(r.max, seq)
	b := c.book[run]
	if b == nil {
		return
	}
	i, found := slices.BinarySearchFunc(b.rows, seq, func(d rowDigest, seq int64) int { return cmp.Compare(d.seq, seq) })
	if !found {
		return
	}
	c.compared++
	if sha256.Sum256(line) == b.rows[i].sum {
		return
	}
	if r.differ == nil {
		r.differ = &checkFinding{Kind: "differ", Run: run, RunEscaped: escapedIfInvalid(run), FromSeq: seq, ToSeq: seq, Line: c.line}
	}
	d := r.differ
	d.Lines++
	d.FromSeq, d.ToSeq = min(d.FromSeq, seq), max(d.ToSeq, seq)
}

// readFile reads the journal file at path, and nothing else: no lock, no cut of a torn last line.
func (c *checker) readFile(ctx context.Context, path string) error {
	if err := checkFile(path, "journal"); err != nil {
		return err
	}
	// Opening a named pipe would wait for a writer: refuse it, as anything else not a file, first.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("journal %s is not a regular file", quote(path))
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// A database or a log given for the journal is a mistake to name, not lines to report.
	if err := journal.Inspect(f); err != nil {
		return err
	}
	if err := c.readLines(ctx, f); err != nil {
		return fmt.Errorf("read the journal %s: %w", quote(path), err)
	}
	return nil
}

// readStream reads the stream as `outbox verify --nats` does, up to its last message when the read
// begins. A message that would not be one journal line, or is not its subject's run's, ends the
// read and is reported as the journal's problem.
func (c *checker) readStream(ctx context.Context, url, stream string) error {
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		return err
	}
	defer closeConn()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := ojs.WriteLines(ctx, js, stream, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	err = c.readLines(ctx, pr)
	pr.CloseWithError(errors.New("check: stopped reading"))
	werr := <-done
	var bad *journal.Error
	if errors.As(werr, &bad) {
		c.line++
		c.problem(checkFinding{Run: bad.Run, Message: message(bad) + "; the rest of the stream was not read"})
		return nil
	}
	return err
}

// readLines feeds c every complete line of r, holding no more of a line than a journal line may be.
// A last line without its newline is a torn tail: reported, not read.
func (c *checker) readLines(ctx context.Context, r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var buf []byte
	var long int64 // bytes of a line past the limit so far
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line := chunk[:len(chunk)-1]
			if len(buf) > 0 {
				buf = append(buf, chunk...)
				line = buf[:len(buf)-1]
			}
			switch size := long + int64(len(line)); {
			case long > 0 || size > outbox.DefaultMaxLineSize:
				c.add(nil, size)
			default:
				c.add(line, 0)
			}
			buf, long = buf[:0], 0
		case errors.Is(err, bufio.ErrBufferFull):
			if long > 0 || len(buf)+len(chunk) > outbox.DefaultMaxLineSize {
				long += int64(len(buf) + len(chunk))
				buf = buf[:0]
				continue
			}
			buf = append(buf, chunk...)
		case errors.Is(err, io.EOF):
			c.torn = long > 0 || len(buf)+len(chunk) > 0
			return nil
		default:
			return err
		}
	}
}

// findings compares what the journal holds with the book, looking up again in the book each run the
// journal holds more of than the first read showed: an engine that enqueued and projected it
// meanwhile is not a finding.
func (c *checker) findings(ctx context.Context, d *sql.DB) ([]checkFinding, error) {
	out := slices.Clone(c.problems)
	if c.more > 0 {
		out = append(out, checkFinding{Kind: "journal", Message: fmt.Sprintf("and %s more in the journal (outbox verify names them)", counted(int64(c.more), "problem"))})
	}
	for id, b := range c.book {
		have := int64(0)
		if r := c.runs[id]; r != nil {
			have = r.last
		}
		if b.projected > have {
			out = append(out, checkFinding{Kind: "missing", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: have + 1, ToSeq: b.projected,
				Message: fmt.Sprintf("run %s: the journal lacks %s, which the book records as projected", quote(id), seqs(have+1, b.projected))})
		}
	}
	var beyond []string // runs the journal holds more of than the book showed
	for id, r := range c.runs {
		if r.differ != nil {
			f := *r.differ
			f.Message = fmt.Sprintf("run %s: %s differs between the book and the journal (journal line %d)", quote(id), seqs(f.FromSeq, f.FromSeq), f.Line)
			if f.Lines > 1 {
				f.Message += fmt.Sprintf("; %d lines differ, between seqs %d and %d", f.Lines, f.FromSeq, f.ToSeq)
			}
			out = append(out, f)
		}
		if b := c.book[id]; b == nil || r.max > b.last {
			beyond = append(beyond, id)
		}
	}
	var known map[string]int64
	if err := readAgainIfMet(func() (err error) { known, err = lastSeqs(ctx, d, beyond); return err }); err != nil {
		return nil, fmt.Errorf("read the book again: %w", err)
	}
	for _, id := range beyond {
		r := c.runs[id]
		last, ok := known[id]
		switch {
		case !ok:
			out = append(out, checkFinding{Kind: "unknown_run", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: 1, ToSeq: r.max, Lines: r.lines,
				Message: fmt.Sprintf("run %s: the journal holds %s of a run the book does not know", quote(id), seqs(1, r.max))})
		case r.max > last:
			out = append(out, checkFinding{Kind: "unknown_lines", Run: id, RunEscaped: escapedIfInvalid(id), FromSeq: last + 1, ToSeq: r.max,
				Message: fmt.Sprintf("run %s: the journal holds %s, beyond the highest seq the book gave the run (%d)", quote(id), seqs(last+1, r.max), last)})
		}
	}
	slices.SortStableFunc(out, func(a, b checkFinding) int {
		return cmp.Or(cmp.Compare(slices.Index(checkKinds, a.Kind), slices.Index(checkKinds, b.Kind)),
			cmp.Compare(a.Run, b.Run), cmp.Compare(a.Line, b.Line), cmp.Compare(a.FromSeq, b.FromSeq))
	})
	return out, nil
}

// lastSeqs reads, in one read transaction, the highest seq the book gave each of the runs it knows
// among ids; a run it does not know is absent.
func lastSeqs(ctx context.Context, d *sql.DB, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	tx, err := d.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	q := db.New()
	for _, id := range ids {
		used, err := q.EventsRunUsed(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		if used == 0 {
			continue
		}
		if out[id], err = q.EventLastSeq(ctx, tx, id); err != nil {
			return nil, err
		}
	}
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
		journalName = "stream " + quote(rep.Stream) + " at " + quote(rep.NATS)
	}
	if rep.Error == "" {
		fmt.Fprintf(w, "book %s: %s; journal %s: %s, %s", quote(rep.DB), counted(int64(rep.BookRuns), "run"), journalName,
			counted(int64(rep.JournalRuns), "run"), counted(rep.JournalLines, "line"))
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

// counted is n and the noun, agreeing in number: "1 run", "2 runs".
func counted(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
