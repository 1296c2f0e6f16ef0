// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
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

// What check reads: the book, in one snapshot, and the journal, a line at a time.

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

// rowDigest is a stored line as check compares it: the SHA-256 of a line the book stores, or the
// digest a projected ledger row keeps in its place (outbox.LineDigest, in sum's first bytes).
type rowDigest struct {
	seq  int64
	sum  [sha256.Size]byte
	kind uint8
}

// The kinds of rowDigest.
const (
	lineSum      = iota // sum is the SHA-256 of the line the book stores
	ledgerDigest        // sum[:outbox.LineDigestSize] is the line's digest
	noDigest            // a ledger row whose digest a rollback dropped: nothing to compare
)

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
	// The positions of every run ever projected or forgotten, whose lines may all be gone, a page at
	// a time.
	q := db.New()
	for after := ""; ; {
		page, err := q.ProgressPage(ctx, tx, db.ProgressPageParams{AfterRun: after, MaxRuns: bookPage})
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			runs[p.EngineRunID] = &bookRun{projected: p.Projected, last: p.LastSeq}
		}
		if len(page) < bookPage {
			break
		}
		after = page[len(page)-1].EngineRunID
	}
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

// readRows reads the digests of a run's stored lines, a page at a time, a large line read from where
// it is stored as the relay reads it, and a projected ledger row's digest as the row keeps it.
func readRows(ctx context.Context, q *db.Queries, tx *sql.Tx, runID string) ([]rowDigest, error) {
	var out []rowDigest
	for after := int64(0); ; {
		page, err := q.LedgerRunRows(ctx, tx, db.LedgerRunRowsParams{EngineRunID: runID, AfterSeq: after, MaxRows: bookPage})
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			out = append(out, storedDigest(l.Seq, l.Line, l.Emptied != 0, l.Digest))
			after = l.Seq
		}
		if len(page) < bookPage {
			return out, nil
		}
	}
}

// storedDigest is what check compares of a stored row: its line's SHA-256, or, for a ledger row whose
// line the book no longer keeps (emptied), the digest it keeps. An empty line, which no enqueue
// stores, is a ledger row whose line and digest a rollback of the schema dropped: nothing to compare.
func storedDigest(seq int64, line []byte, emptied bool, digest []byte) rowDigest {
	d := rowDigest{seq: seq}
	switch {
	case !emptied && len(line) > 0:
		d.sum = sha256.Sum256(line)
	case len(digest) == outbox.LineDigestSize:
		d.kind = ledgerDigest
		copy(d.sum[:], digest)
	default:
		d.kind = noDigest
	}
	return d
}

// matches reports whether a journal line, whose SHA-256 is sum, is the stored row's.
func (d rowDigest) matches(line []byte, sum [sha256.Size]byte) bool {
	if d.kind == ledgerDigest {
		return bytes.Equal(outbox.LineDigest(line), d.sum[:outbox.LineDigestSize])
	}
	return sum == d.sum
}

// journalRun is what the journal holds of a run.
type journalRun struct {
	last   int64 // seqs 1..last are all in the journal
	max    int64 // the highest seq seen
	gap    bool  // a seq came after a hole: last stays before it
	lines  int64
	differ []differLine // in the order the journal holds them
}

// differLine is a journal line whose bytes were not those of the book's line of the same seq when
// the book was read. It is only a candidate: an engine may have retired the line and projected its
// tombstone since.
type differLine struct {
	seq    int64
	line   int64 // the journal line, 1-based
	sum    [sha256.Size]byte
	digest []byte // outbox.LineDigest of the line, to compare with a ledger row
}

// checker holds the book and what reading the journal found.
type checker struct {
	book     map[string]*bookRun
	runs     map[string]*journalRun
	line     int64 // the journal line being read, 1-based
	lines    int64 // complete journal lines of a run, repeats included
	repeats  int64 // lines whose seq the run already had: duplicates, or conflicts verify names
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
	case seq <= r.last:
		c.repeats++
	case r.gap:
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
	if !found || b.rows[i].kind == noDigest {
		return
	}
	c.compared++
	if sum := sha256.Sum256(line); !b.rows[i].matches(line, sum) {
		r.differ = append(r.differ, differLine{seq: seq, line: c.line, sum: sum, digest: outbox.LineDigest(line)})
	}
}

// stillDiffer reads again, in one read transaction, the book's line of every seq the journal held
// other bytes of, and returns, by run, those that still differ. An engine that retires a pending line
// between the read of the book and the read of the journal projects a tombstone of the same key: the
// book then stores the journal's bytes, or, once a later start forgot the run's lines, nothing. A
// line gone from the book is kept only when the first read had it projected: a projected line is
// never retired, so its bytes were in the journal when the book said otherwise.
func (c *checker) stillDiffer(ctx context.Context, d *sql.DB) (map[string][]differLine, error) {
	out := map[string][]differLine{}
	n := 0
	for _, r := range c.runs {
		n += len(r.differ)
	}
	if n == 0 {
		return out, nil
	}
	tx, err := d.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	q := db.New()
	for id, r := range c.runs {
		for _, dl := range r.differ {
			row, err := q.LedgerRowGet(ctx, tx, db.LedgerRowGetParams{EngineRunID: id, Seq: dl.seq})
			switch {
			case errors.Is(err, sql.ErrNoRows):
				if dl.seq > c.book[id].projected {
					continue
				}
			case err != nil:
				return nil, err
			case row.Emptied != 0 && (len(row.Digest) != outbox.LineDigestSize || bytes.Equal(row.Digest, dl.digest)):
				continue
			case row.Emptied == 0 && (len(row.Line) == 0 || sha256.Sum256(row.Line) == dl.sum):
				continue
			}
			out[id] = append(out[id], dl)
		}
	}
	return out, nil
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
func (c *checker) readStream(ctx context.Context, nf *natsFlags, stream string) error {
	js, closeConn, err := nf.connect()
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
