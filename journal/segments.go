// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

// DefaultSegmentSize is the size a Journal's segment is sealed at unless WithSegmentSize says
// otherwise.
const DefaultSegmentSize = 128 << 20

// The fault points of a roll, in the order it passes them.
const (
	faultBeforeIndex = "journal.before_index" // the last segment is full; its index is not written
	faultIndexTmp    = "journal.index_tmp"    // the index is written and synced under its temporary name
	faultAfterIndex  = "journal.after_index"  // its index is written; the next segment is not created
	faultAfterRoll   = "journal.after_roll"   // the next segment is created; the batch is not written
)

// The fault points of a checkpoint of the last segment, in the order it passes them.
const (
	faultBeforeCheckpoint = "journal.before_checkpoint" // a batch is appended; the checkpoint is not begun
	faultCheckpointTmp    = "journal.checkpoint_tmp"    // the checkpoint is written and synced under its temporary name
	faultAfterCheckpoint  = "journal.after_checkpoint"  // the checkpoint is renamed into place and the directory synced
)

// checkpointEvery is how many bytes may be appended to the last segment after its checkpoint
// before the next is written: what a start reads of lines at most, whatever the segment size.
const checkpointEvery = 16 << 20

// faultBeforeMkdir: Open found no directory and has not created it yet.
const faultBeforeMkdir = "journal.before_mkdir"

const (
	segmentExt = ".jsonl"
	indexExt   = ".idx"
	tmpExt     = ".idx.tmp"
	nameDigits = 20
)

// Option configures Open.
type Option func(*options)

type options struct {
	segmentSize     int64
	checkpointEvery int64
	summaryEvery    int
	ops             fileOps

	keep     time.Duration
	maxBytes int64
	maxSet   bool
	retain   bool
	logger   *slog.Logger
	now      func() time.Time
}

// WithSegmentSize sets the size a segment is sealed at (DefaultSegmentSize by default): a batch that
// would take the last segment past n bytes goes to a new one. A batch is never split, so a segment
// exceeds n only when it holds a single batch larger than n. n must be positive.
func WithSegmentSize(n int64) Option { return func(o *options) { o.segmentSize = n } }

// WithCheckpointEvery sets how many bytes may be appended to the last segment after its checkpoint
// before the next checkpoint is written (16 MiB by default): at most what a start reads of lines,
// whatever the segment size. A smaller n makes starts read less for a few more small writes (each
// checkpoint is written to a temporary name, synced and renamed); a larger one the other way round.
// n must be positive.
func WithCheckpointEvery(n int64) Option {
	return func(o *options) { o.checkpointEvery = n }
}

// withOps replaces the file system calls of appends, for tests.
func withOps(ops fileOps) Option { return func(o *options) { o.ops = ops } }

// Journal is a journal kept as a directory of segment files, for appending. It is the outbox's
// segmented sink, with every check File makes (see Append); a start reads the sealed segments'
// index files, the last segment's checkpoint and the lines after it, not the journal's history.
// A Journal holds an exclusive lock on its directory while open. Its methods are safe for
// concurrent use.
type Journal struct {
	runLog
	mu sync.Mutex
	appendFile

	dir       string
	dirf      *os.File // the directory, locked
	segSize   int64
	ckptEvery int64
	ckptEnd   int64 // the position the last segment's checkpoint covers up to (tailBase without one)

	sealed []segment // in order; the last segment (the tail) follows them
	// unsummarized counts the sealed segments the summary on disk leaves out (see writeSummary).
	unsummarized int
	sumEvery     int
	tailBase     int64
	lastLine     int64    // where the tail's last complete line starts, when it has one
	tailRuns     runIndex // the tail's own spans, written beside it when it is sealed
	loaded       int      // sealed segments whose spans are in runs
	merged       bool     // tailRuns is in runs too

	rd    *os.File // a sealed segment open for reading, kept for the next read
	rdIdx int

	ret retention
	st  *retState // the directory's retention record, as last written
}

// segment is a sealed segment: where it lies, and what Open found of its file (its modification
// time and inode number), with its index once a lookup has read it.
type segment struct {
	base, size int64
	mtime      int64
	ino        uint64
	si         *segIndex
}

func segmentName(base int64) string { return fmt.Sprintf("%0*d%s", nameDigits, base, segmentExt) }
func indexName(base int64) string   { return fmt.Sprintf("%0*d%s", nameDigits, base, indexExt) }

// parseBase reads the position in a name of the journal's form: nameDigits digits and ext.
func parseBase(name, ext string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, ext)
	if !ok || len(digits) != nameDigits || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	return v, err == nil
}

// Open opens the journal kept in dir for appending, creating dir (and its first segment) when it is
// missing or empty. dir holds only the journal's files: segments named by the journal-wide position
// of their first byte (%020d.jsonl), the sealed segments' index files (%020d.idx), the seal summary
// (seals.summary), the registered readers' files (NAME.reader) and the retention record
// (retention.state). Anything else
// in it, a path that is not a directory, or a last segment that is not a journal, is ErrNotJournal,
// left as it was. A sealed segment whose size does not end where the next one's name begins (another
// program appended to it, or cut it) is ErrModified. Open takes an exclusive lock on dir, failing
// with ErrLocked when another Journal, in this process or another, has it open, and cuts the last
// segment's torn tail, and reads the last segment's checkpoint (see the package's doc), removing one
// it does not trust. It reads no sealed segment: the first Append or LastSeq reads their indexes.
func Open(dir string, opts ...Option) (*Journal, error) {
	o := options{segmentSize: DefaultSegmentSize, checkpointEvery: checkpointEvery, summaryEvery: summaryEvery, ops: osOps{}}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("journal: Open: a nil Option")
		}
		opt(&o)
	}
	if o.segmentSize <= 0 {
		return nil, fmt.Errorf("journal: Open: segment size %d: it must be positive", o.segmentSize)
	}
	if o.checkpointEvery <= 0 {
		return nil, fmt.Errorf("journal: Open: checkpoint interval %d: it must be positive", o.checkpointEvery)
	}
	ret, err := newRetention(&o)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, errors.New("journal: Open: no directory named")
	}
	switch st, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		// Another process's Open may create it first: the lock below decides which one appends.
		faultpoint.Hit(faultBeforeMkdir)
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) {
			if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
				err = nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("journal: create %s: %w", dir, err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("journal: %w", err)
	case !st.IsDir():
		return nil, fmt.Errorf("%w: %s is not a directory (a single-file journal is opened with OpenFile, "+
			"or carried over with outbox journal adopt); it was not opened", ErrNotJournal, dir)
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", dir, err)
	}
	if err := lock(dirf); err != nil {
		dirf.Close()
		if errors.Is(err, errHeld) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("journal: lock %s: %w", dir, err)
	}
	j := &Journal{dir: dir, dirf: dirf, segSize: o.segmentSize, ckptEvery: o.checkpointEvery, sumEvery: o.summaryEvery, rdIdx: -1, ret: ret}
	j.name, j.src, j.ops = dir, j, o.ops
	if err := j.open(); err != nil {
		if j.f != nil {
			j.f.Close()
		}
		unlock(dirf)
		return nil, err
	}
	return j, nil
}

// open reads the directory's names and opens the last segment; called with the lock held.
func (j *Journal) open() error {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return fmt.Errorf("journal: read %s: %w", j.dir, err)
	}
	var bases []int64
	indexes := map[int64]bool{}
	var remove []string
	for _, e := range ents {
		name := e.Name()
		if base, ok := parseBase(name, segmentExt); ok {
			if !e.Type().IsRegular() {
				return fmt.Errorf("%w: %s: %s is not a regular file", ErrNotJournal, j.dir, name)
			}
			bases = append(bases, base)
			continue
		}
		if base, ok := parseBase(name, indexExt); ok && e.Type().IsRegular() {
			indexes[base] = true
			continue
		}
		if _, ok := parseBase(name, tmpExt); ok && e.Type().IsRegular() {
			remove = append(remove, name) // an index whose write a crash interrupted
			continue
		}
		if _, ok := parseReaderFileName(name); ok && e.Type().IsRegular() {
			continue // a registered reader's position, written by the reader
		}
		if name == stateName && e.Type().IsRegular() {
			continue
		}
		if name == stateTmpName && e.Type().IsRegular() {
			remove = append(remove, name) // a record whose write a crash interrupted
			continue
		}
		if name == summaryName && e.Type().IsRegular() {
			continue // read, and judged record by record, by the first lookup
		}
		if name == summaryTmpName && e.Type().IsRegular() {
			remove = append(remove, name) // a summary whose write a crash interrupted
			continue
		}
		if parseReaderTmpName(name) && e.Type().IsRegular() {
			// A reader's write under way, or one a crash interrupted: only an old one is left over.
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleReaderTmp {
				remove = append(remove, name)
			}
			continue
		}
		return fmt.Errorf("%w: %s holds %q, which is not a file of a journal; it was not opened", ErrNotJournal, j.dir, name)
	}
	slices.Sort(bases)
	st, found, err := readState(j.dir)
	if err != nil {
		return err
	}
	j.st = st
	if len(bases) == 0 {
		if len(indexes) > 0 {
			return fmt.Errorf("%w: %s holds index files but no segment; it was not opened", ErrNotJournal, j.dir)
		}
		if st.tail > 0 {
			return fmt.Errorf("%w: %s holds no segment, and its retention record says the journal reached byte %d: "+
				"its segments were deleted by another program; it was not opened: %w", ErrModified, j.dir, st.tail, outbox.ErrSinkRefused)
		}
		bases = []int64{0}
	}
	if err := checkEnds(j.dir, bases, st, found); err != nil {
		return err
	}
	for i, base := range bases[:len(bases)-1] {
		st, err := os.Stat(filepath.Join(j.dir, segmentName(base)))
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		want := bases[i+1] - base
		if st.Size() != want {
			return fmt.Errorf("%w: %s: sealed segment %s is %d bytes, and the next segment's name says %d: "+
				"another program appended to it or cut it: %w", ErrModified, j.dir, segmentName(base), st.Size(), want, outbox.ErrSinkRefused)
		}
		j.sealed = append(j.sealed, segment{base: base, size: want, mtime: st.ModTime().UnixNano(), ino: fileID(st)})
	}
	j.tailBase = bases[len(bases)-1]
	segs := make(map[int64]bool, len(bases))
	for _, b := range bases {
		segs[b] = true
	}
	for base := range indexes {
		// The last segment's .idx can only be its checkpoint, judged once the segment is open
		// below: a seal index there was written before a crash stopped a roll, and the segment may
		// have grown since. One without its segment is an orphan.
		if base > j.tailBase || !segs[base] {
			remove = append(remove, indexName(base))
		}
	}
	path := filepath.Join(j.dir, segmentName(j.tailBase))
	f, created, err := openRegular(path)
	if err != nil {
		return err
	}
	j.path, j.f = path, f
	end, err := inspect(f)
	if err != nil {
		return inspectError(path, err)
	}
	if end.size != end.complete {
		if err := j.ops.Truncate(f, end.complete); err != nil {
			return fmt.Errorf("journal: cut the torn tail of %s: %w", path, err)
		}
		if err := j.ops.Datasync(f); err != nil {
			return fmt.Errorf("journal: sync %s after cutting its torn tail: %w", path, err)
		}
	}
	j.size, j.tail, j.lastLine = end.complete, end.tail, j.tailBase+end.lastStart
	j.runs.init(0)
	j.tailRuns.init(j.size)
	j.tailRuns.scanned = j.tailBase
	j.ckptEnd = j.tailBase
	if indexes[j.tailBase] {
		ok, err := j.loadCheckpoint()
		if err != nil {
			return err
		}
		if !ok {
			remove = append(remove, indexName(j.tailBase))
		}
	}
	for _, name := range remove {
		if err := os.Remove(filepath.Join(j.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("journal: %w", err)
		}
	}
	if created || len(remove) > 0 {
		if err := syncDir(j.dir); err != nil {
			return err
		}
	}
	return nil
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Path returns the journal's directory, as File's Path returns its file.
func (j *Journal) Path() string { return j.dir }

// Close releases the directory's lock and closes the segments. Appends after Close fail. A read
// under way in another goroutine's Append or LastSeq gives up at its next MiB.
func (j *Journal) Close() error {
	j.closing.Store(true)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	j.f.Close()
	j.f = nil
	if j.rd != nil {
		j.rd.Close()
		j.rd, j.rdIdx = nil, -1
	}
	if err := unlock(j.dirf); err != nil {
		return fmt.Errorf("journal: close %s: %w", j.dir, err)
	}
	return nil
}

var _ io.Closer = (*Journal)(nil)
