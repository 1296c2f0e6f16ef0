// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/textmachine/outbox/internal/litedb"
	ojs "github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// What check reads: the book, in one snapshot, and the journal, a line at a time.

// readAgainIfMet runs fn again while it fails having read nothing, as a read-only Store's reads do: it
// met an engine opening the book (ErrBookOpened), or a commit of the engine's through a -shm this
// user cannot write.
func readAgainIfMet(fn func() error) error {
	return litedb.ReadAgainOpened(context.Background(), func(context.Context) error { return fn() })
}

// bookRun is what the book knows of a run, from its per-run figures: a few bytes a run, whatever
// the rows it stores.
type bookRun struct {
	projected int64 // every seq up to this one is in the journal
	last      int64 // the highest seq the run was ever given, forgotten lines included
}

// bookPage is how many of a run's stored rows one read brings in.
const bookPage = 512

// maxPages is how many runs' pages of stored rows the checker keeps at once: the runs the journal
// met most recently. The journal holds a run's lines in seq order, a few runs interleaved, so a page
// serves its run's next lines; a run met again after its page went is read again from its seq.
const maxPages = 64

// rowPage is a page of a run's stored rows: every row the book stored with a seq in (after, upTo]
// when it was read.
type rowPage struct {
	after, upTo int64
	rows        []outbox.StoredDigest
	used        int64 // the journal line that used it last
}

// readBook reads every run the book knows, from its per-run figures, a page of runs at a time.
func readBook(ctx context.Context, s *outbox.Store) (map[string]*bookRun, error) {
	runs := map[string]*bookRun{}
	for r, err := range s.EveryRun(ctx) {
		if err != nil {
			return nil, err
		}
		runs[r.RunID] = &bookRun{projected: r.Projected, last: r.LastSeq}
	}
	return runs, nil
}

// storedRow returns the book's stored row of run at seq, reading the run's page from seq on when the
// page it has does not cover seq; ok is false when the book stores no such row.
func (c *checker) storedRow(ctx context.Context, run string, seq int64) (d outbox.StoredDigest, ok bool, err error) {
	p := c.pages[run]
	if p == nil || seq <= p.after || seq > p.upTo {
		var rows []outbox.StoredDigest
		if err := readAgainIfMet(func() (err error) {
			rows, err = c.store.StoredDigests(ctx, run, seq-1, bookPage)
			return err
		}); err != nil {
			return d, false, err
		}
		if p == nil {
			if len(c.pages) == maxPages {
				c.dropPage()
			}
			p = &rowPage{}
			c.pages[run] = p
		}
		p.after, p.upTo, p.rows = seq-1, math.MaxInt64, rows
		if len(rows) == bookPage {
			p.upTo = rows[len(rows)-1].Seq
		}
		c.pageReads++
	}
	p.used = c.line
	i, found := slices.BinarySearchFunc(p.rows, seq, func(d outbox.StoredDigest, seq int64) int { return cmp.Compare(d.Seq, seq) })
	if !found {
		return d, false, nil
	}
	return p.rows[i], true, nil
}

// dropPage forgets the page used least recently.
func (c *checker) dropPage() {
	var oldest string
	for run, p := range c.pages {
		if oldest == "" || p.used < c.pages[oldest].used {
			oldest = run
		}
	}
	delete(c.pages, oldest)
}

// journalRun is what the journal holds of a run.
type journalRun struct {
	last  int64 // seqs 1..last are all in the journal
	max   int64 // the highest seq seen
	gap   bool  // a seq came after a hole: last stays before it
	lines int64
	// beyond is where the journal first held a seq beyond the book's last seq of the first read (0:
	// nowhere), for the finding that names it.
	beyond      int64
	beyondAt    string
	differ      []differLine // in the order the journal holds them, up to maxDiffer
	differAfter int64        // lines that differed after the first maxDiffer, not looked up again
}

// maxDiffer bounds the lines of a run check keeps to look up again, so that a journal that differs
// from its book throughout costs a few kilobytes a run, not a record a line.
const maxDiffer = 64

// differLine is a journal line whose bytes were not those of the book's line of the same seq when
// the book was read. It is only a candidate: an engine may have retired the line and projected its
// tombstone since.
type differLine struct {
	seq  int64
	line int64  // the journal line, 1-based
	at   string // where: its segment and line there, for a journal directory
	sum  [sha256.Size]byte
}

// checker holds the book's per-run figures, a few pages of stored rows, and what reading the journal
// found, per run.
type checker struct {
	store     *outbox.Store
	book      map[string]*bookRun
	pages     map[string]*rowPage
	pageReads int64
	runs      map[string]*journalRun
	line      int64  // the journal line being read, 1-based
	segment   string // the segment being read, in a journal directory
	segLine   int64  // c.line at the segment's start
	start     int64  // the position of a journal directory's first segment: not 0 when trimmed
	lines     int64  // complete journal lines of a run, repeats included
	repeats   int64  // lines whose seq the run already had: duplicates, or conflicts verify names
	compared  int64
	torn      bool
	problems  []checkFinding // the journal's own
	more      int            // problems beyond maxJournalProblems
	err       error          // a read of the book that failed while the journal was read
}

// at names where the current line is: in a directory, its segment and its line there.
func (c *checker) at() string {
	if c.segment == "" {
		return ""
	}
	return fmt.Sprintf("segment %s line %d", c.segment, c.line-c.segLine)
}

func (c *checker) problem(f checkFinding) {
	if len(c.problems) == maxJournalProblems {
		c.more++
		return
	}
	f.Kind, f.Line, f.Segment = "journal", c.line, c.at()
	f.RunEscaped = escapedIfInvalid(f.Run)
	where := fmt.Sprintf("journal line %d", c.line)
	if f.Segment != "" {
		where += " (" + f.Segment + ")"
	}
	f.Message = fmt.Sprintf("%s: %s", where, f.Message)
	c.problems = append(c.problems, f)
}

// add takes one complete journal line (without its newline); tooLong is its length when it is
// longer than a journal line may be, and line is then nil.
func (c *checker) add(ctx context.Context, line []byte, tooLong int64) {
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
		if c.start > 0 {
			r.last = seq - 1
		}
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
	if (b == nil || seq > b.last) && r.beyond == 0 {
		r.beyond, r.beyondAt = c.line, c.at()
	}
	if b == nil || seq > b.last || c.err != nil {
		return
	}
	d, ok, err := c.storedRow(ctx, run, seq)
	if err != nil {
		c.err = fmt.Errorf("read the book: %w", err)
		return
	}
	if !ok {
		return
	}
	sum := sha256.Sum256(line)
	same, compared := d.Compare(line, sum)
	if !compared {
		return
	}
	c.compared++
	switch {
	case same:
	case len(r.differ) < maxDiffer:
		r.differ = append(r.differ, differLine{seq: seq, line: c.line, at: c.at(), sum: sum})
	default:
		r.differAfter++
	}
}

// stillDiffer reads again the book's line of every seq the journal held other bytes of, and
// returns, by run, those that still differ. An engine that retires a pending line between the read
// of the book and the read of the journal projects a tombstone of the same key: the book then stores
// the journal's bytes, or, once a later start forgot the run's lines, nothing. A line gone from the
// book is kept only when the first read had it projected: a projected line is never retired, so its
// bytes were in the journal when the book said otherwise.
func (c *checker) stillDiffer(ctx context.Context) (map[string][]differLine, error) {
	out := map[string][]differLine{}
	for id, r := range c.runs {
		for _, dl := range r.differ {
			d, ok, err := c.store.StoredDigestAt(ctx, id, dl.seq)
			switch {
			case err != nil:
				return nil, err
			case !ok:
				if dl.seq > c.book[id].projected {
					continue
				}
			default:
				if same, compared := d.Compare(nil, dl.sum); same || !compared {
					continue
				}
			}
			out[id] = append(out[id], dl)
		}
	}
	return out, nil
}

// readJournal reads the journal at path, a directory of segments or one file, and nothing else: no
// lock but a reader's shared one on each segment, no cut of a torn last line.
func (c *checker) readJournal(ctx context.Context, path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return c.readDir(ctx, path)
	}
	return c.readFile(ctx, path)
}

// readDir reads the segments of the journal directory dir in order, as one journal. A sealed
// segment that ends within a line, or that does not end where the next one begins, is the journal's
// problem, named.
func (c *checker) readDir(ctx context.Context, dir string) error {
	segs, err := journal.SegmentsOf(dir)
	if err != nil {
		return err
	}
	// What retention left of a journal begins mid-way: a run may begin at any seq there.
	c.start = segs[0].Position
	for i, sg := range segs {
		c.segment, c.segLine = filepath.Base(sg.Path), c.line
		f, err := journal.OpenSegmentForReading(sg.Path)
		if err != nil {
			return err
		}
		cr := &countReader{r: f}
		err = c.readLines(ctx, cr)
		f.Close()
		if err != nil {
			return fmt.Errorf("read the journal segment %s: %w", quote(sg.Path), err)
		}
		if i == len(segs)-1 {
			break
		}
		if c.torn {
			c.torn = false
			c.problem(checkFinding{Message: "a sealed segment ends without a newline (its last line is torn, or bytes were added to it)"})
		}
		if end := sg.Position + cr.n; end != segs[i+1].Position {
			c.problem(checkFinding{Message: fmt.Sprintf("the segment ends at position %d, but the next one begins at %d: bytes were cut from it, added to it, or lie in a segment that is gone",
				end, segs[i+1].Position)})
		}
	}
	return nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
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
		if c.err != nil {
			return c.err
		}
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
				c.add(ctx, nil, size)
			default:
				c.add(ctx, line, 0)
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

// lastSeqs reads the highest seq the book gave each of the runs it knows among ids; a run it does
// not know is absent.
func (c *checker) lastSeqs(ctx context.Context, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, id := range ids {
		st, ok, err := c.store.RunOf(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out[id] = st.LastSeq
		}
	}
	return out, nil
}
