// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
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

// loadCheckpoint reads the checkpoint beside the last segment and trusts it only when it is a
// checkpoint of that segment's file as it is now: its checksum holds, it names the segment's
// position and file (its inode: a copy of the directory is other files), it covers no more than the
// segment's complete lines, and the line it says its part ends with, read alone, has the digest it
// records. Then the first read of the last segment starts where it ends. Any other (torn, another
// segment's or journal's, a copy's, or one whose part a crash or a program cut back and rewrote)
// is not trusted: ok is false, and the segment is read whole.
func (j *Journal) loadCheckpoint() (ok bool, err error) {
	ck, err := readCheckpoint(j.dir, j.tailBase, j.f, j.size)
	if ck == nil || err != nil {
		return false, err
	}
	ck.mergeInto(&j.tailRuns)
	j.tailRuns.scanned = ck.base + ck.size
	j.ckptEnd = ck.base + ck.size
	return true, nil
}

// readCheckpoint returns the checkpoint beside the segment at base in dir, open as f with size bytes
// of complete lines, when it is to be trusted by loadCheckpoint's rules, or nil. A reader of the
// journal that reads its last segment can start after it too.
func readCheckpoint(dir string, base int64, f *os.File, size int64) (*segIndex, error) {
	b, err := os.ReadFile(filepath.Join(dir, indexName(base)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	ck, err := parseCheckpoint(b)
	if err != nil || ck.base != base || ck.size > size {
		return nil, nil
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if id := fileID(st); id == 0 || id != ck.ino {
		return nil, nil
	}
	line := make([]byte, ck.size-ck.lastStart)
	if err := readAt(f, line, ck.lastStart); err != nil {
		return nil, fmt.Errorf("journal: read %s at byte %d: %w", f.Name(), ck.lastStart, err)
	}
	if line[len(line)-1] != '\n' || sha256.Sum256(line) != ck.lastSum {
		return nil, nil
	}
	return ck, nil
}

// checkpoint writes the last segment's index as it is now beside it (as its .idx, which sealing
// replaces by the seal index), so that the next start reads only the lines after it. It is an aid,
// never a record the journal needs: a failure leaves the last checkpoint (still a true account of a
// shorter part) or none, and does not fail the append whose batch is already durable. The next try
// comes a checkpoint's interval later, not at the next append.
func (j *Journal) checkpoint() {
	end := j.tailBase + j.size
	j.ckptEnd = end
	if j.size == 0 || !j.tailRuns.built {
		return
	}
	faultpoint.Hit(faultBeforeCheckpoint)
	sum, ok, err := j.lineSum(j.lastLine, end)
	if err != nil || !ok {
		return
	}
	st, err := j.f.Stat()
	if err != nil || fileID(st) == 0 {
		return
	}
	si := segIndexOf(&j.tailRuns, j.tailBase, j.size, 0, j.lastLine, sum)
	si.checkpoint, si.ino = true, fileID(st)
	if j.writeIndex(si) == nil {
		faultpoint.Hit(faultAfterCheckpoint)
	}
}

// checkpointDue tells whether the last segment has grown a checkpoint's interval past its last one.
func (j *Journal) checkpointDue() bool {
	return j.ckptEvery > 0 && j.tailBase+j.size-j.ckptEnd >= j.ckptEvery
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Path returns the journal's directory, as File's Path returns its file.
func (j *Journal) Path() string { return j.dir }

// Append writes lines, each followed by a newline, at the end of the journal, then fdatasyncs, with
// File.Append's guarantees and checks, against the whole retained journal: a re-delivery is compared
// with its copies in whichever segments hold them, and a run's first batch is refused when any
// segment holds a run of that id with other bytes. A batch goes whole into one segment: when it
// would take the last segment past the segment size, that segment is sealed (its index written
// beside it) and the batch begins a new one, unless the last segment is empty. Another program's
// write to the last segment, or a change of its name, is ErrModified, found before each append;
// a sealed segment's is found when the journal is opened or the segment is read.
func (j *Journal) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	buf, err := batchBytes(runID, lines)
	if err != nil || buf == nil {
		return err
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	if err := checkBatch(ctx, &j.runLog, &j.appendFile, j.index, runID, lines, buf); err != nil {
		return err
	}
	rolled := false
	if j.size > 0 && j.size+int64(len(buf)) > j.segSize {
		if err := j.roll(); err != nil {
			return err
		}
		rolled = true
	}
	off := j.tailBase + j.size
	if err := j.appendSynced(buf); err != nil {
		return err
	}
	j.runs.noteAppended(runID, lines, off)
	j.tailRuns.noteAppended(runID, lines, off)
	j.tailRuns.scanned = j.tailBase + j.size
	j.lastLine = off + int64(len(buf)-len(lines[len(lines)-1].Line)-1)
	if rolled {
		j.trimAfterSeal(ctx)
		if j.unsummarized >= j.sumEvery {
			j.writeSummary()
		}
	}
	if j.checkpointDue() {
		j.checkpoint()
	}
	return nil
}

// LastSeq returns the highest seq of runID's lines in the journal, or 0 when it holds none.
func (j *Journal) LastSeq(runID string) (int64, error) {
	return j.LastSeqContext(context.Background(), runID)
}

// LastSeqContext returns the highest seq of runID's lines in the journal, or 0 when it holds none.
// The first call after Open (or the first Append) reads the sealed segments' indexes (from the seal
// summary where it holds a record it can trust, from their own files for the rest), rebuilding
// one that is missing or does not match its segment from that segment alone, and reads the last
// segment from its checkpoint on (writing a checkpoint when it had to read more than 16 MiB); it stops with ctx's error when ctx is done, or when Close is called, and the next call
// takes it up where it stopped.
func (j *Journal) LastSeqContext(ctx context.Context, runID string) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return 0, err
	}
	if err := j.checkUnmodified(); err != nil {
		return 0, err
	}
	if err := j.index(ctx); err != nil {
		return 0, err
	}
	return j.runs.last(runID), nil
}

// index loads the sealed segments' indexes and reads the last segment, from where an interrupted
// call stopped.
func (j *Journal) index(ctx context.Context) error {
	if j.merged {
		return nil
	}
	if j.loaded == 0 && len(j.sealed) > 0 && j.sealed[0].si == nil {
		if err := j.readSummary(); err != nil {
			return err
		}
	}
	for j.loaded < len(j.sealed) {
		if err := j.interrupted(ctx); err != nil {
			return err
		}
		seg := &j.sealed[j.loaded]
		if seg.si == nil {
			si, err := j.segmentIndex(ctx, *seg)
			if err != nil {
				return err
			}
			seg.si = si
			j.unsummarized++
		}
		seg.si.mergeInto(&j.runs)
		j.loaded++
	}
	if err := j.scanInto(ctx, &j.tailRuns, j.tailBase+j.size); err != nil {
		return err
	}
	for id, rs := range j.tailRuns.runs {
		j.runs.addSpans(id, rs.spans, 0)
	}
	// A run whose first lines retention deleted keeps its last seq, and its re-deliveries of those
	// lines cannot be compared.
	for _, r := range j.st.runs {
		rs := j.runs.runs[r.RunID]
		if rs == nil {
			rs = &runSpans{}
			j.runs.runs[r.RunID] = rs
		}
		rs.gone = max(rs.gone, r.LastSeq)
		rs.top = max(rs.top, r.LastSeq)
	}
	for _, rs := range j.runs.runs {
		if rs.unsorted {
			rs.sort()
		}
	}
	j.runs.built, j.merged = true, true
	if j.unsummarized >= j.sumEvery {
		// The start read that many index files: the next one need not.
		j.writeSummary()
	}
	if j.checkpointDue() {
		// The segment was read whole (no checkpoint, or one not trusted): the next start need not.
		j.checkpoint()
	}
	return nil
}

// segmentIndex reads a sealed segment's index, and trusts it only when it is the index of that
// segment as it is now: its position, size and modification time, and the digest of its last line,
// read alone. Any
// other index (missing, torn, failing its checksum, another segment's, a stale one) is rebuilt from
// the segment and written again.
func (j *Journal) segmentIndex(ctx context.Context, seg segment) (*segIndex, error) {
	st, err := os.Stat(filepath.Join(j.dir, segmentName(seg.base)))
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(j.dir, indexName(seg.base)))
	if err == nil {
		if si, perr := parseSegIndex(b); perr == nil && si.base == seg.base && si.size == seg.size &&
			si.mtime == st.ModTime().UnixNano() {
			sum, ok, err := j.lineSum(seg.base+si.lastStart, seg.base+seg.size)
			if err != nil {
				return nil, err
			}
			if ok && sum == si.lastSum {
				return si, nil
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return j.rebuildIndex(ctx, seg)
}

// lineSum returns the digest of the bytes from start to end, the last line of what ends at end
// (its newline included); ok is false when they do not end in a newline, which no line the
// journal wrote does.
func (j *Journal) lineSum(start, end int64) (sum [sha256.Size]byte, ok bool, err error) {
	b := make([]byte, end-start)
	if err := j.readAt(b, start); err != nil {
		return sum, false, err
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return sum, false, nil
	}
	return sha256.Sum256(b), true, nil
}

// rebuildIndex reads a sealed segment whole to index it, and writes its index file.
func (j *Journal) rebuildIndex(ctx context.Context, seg segment) (*segIndex, error) {
	path := filepath.Join(j.dir, segmentName(seg.base))
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	end, err := inspect(f)
	var st os.FileInfo
	if err == nil {
		st, err = f.Stat()
	}
	f.Close()
	if err != nil {
		return nil, inspectError(path, err)
	}
	if end.complete != seg.size {
		return nil, fmt.Errorf("%w: sealed segment %s does not end with a complete line: %w", ErrModified, path, outbox.ErrSinkRefused)
	}
	var x runIndex
	x.init(seg.size)
	x.scanned = seg.base
	if err := j.scanInto(ctx, &x, seg.base+seg.size); err != nil {
		return nil, err
	}
	sum, _, err := j.lineSum(seg.base+end.lastStart, seg.base+seg.size)
	if err != nil {
		return nil, err
	}
	si := segIndexOf(&x, seg.base, seg.size, st.ModTime().UnixNano(), seg.base+end.lastStart, sum)
	if err := j.writeIndex(si); err != nil {
		return nil, err
	}
	return si, nil
}

// writeIndex writes a segment's index durably: to a temporary name, synced, renamed, and the
// directory synced, so that the name holds the whole index or none.
func (j *Journal) writeIndex(si *segIndex) error {
	final := filepath.Join(j.dir, indexName(si.base))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("journal: write the index of %s: %w", segmentName(si.base), err)
	}
	_, err = f.Write(si.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if si.checkpoint {
			faultpoint.Hit(faultCheckpointTmp)
		} else {
			faultpoint.Hit(faultIndexTmp)
		}
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: write the index of %s: %w", segmentName(si.base), err)
	}
	return syncDir(j.dir)
}

// roll seals the last segment and starts the next, named by the position it begins at: the index
// first, so that a sealed segment nearly always has one (a crash between the two leaves an index
// beside the last segment, which Open removes), then the new segment, synced into the directory.
func (j *Journal) roll() error {
	faultpoint.Hit(faultBeforeIndex)
	end := j.tailBase + j.size
	sum, _, err := j.lineSum(j.lastLine, end)
	if err != nil {
		return err
	}
	st, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	si := segIndexOf(&j.tailRuns, j.tailBase, j.size, st.ModTime().UnixNano(), j.lastLine, sum)
	if err := j.writeIndex(si); err != nil {
		return err
	}
	faultpoint.Hit(faultAfterIndex)
	path := filepath.Join(j.dir, segmentName(end))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s: another program created %s: %w", ErrModified, j.dir, segmentName(end), outbox.ErrSinkRefused)
	}
	if err != nil {
		return fmt.Errorf("journal: start segment %s: %w", path, err)
	}
	if err := syncDir(j.dir); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	// The record of where the last segment begins is what tells a last segment deleted by hand from
	// a roll a crash interrupted; written after the segment exists, it never names a missing one.
	ns := j.st.clone()
	ns.tail = end
	if err := ns.write(j.dir); err != nil {
		f.Close()
		os.Remove(path)
		syncDir(j.dir)
		return err
	}
	j.st = ns
	faultpoint.Hit(faultAfterRoll)
	j.f.Close()
	j.sealed = append(j.sealed, segment{base: j.tailBase, size: j.size, mtime: si.mtime, ino: fileID(st), si: si})
	j.loaded = len(j.sealed)
	j.unsummarized++
	j.tailBase, j.path, j.f, j.size, j.tail, j.lastLine = end, path, f, 0, j.tail[:0], end
	j.tailRuns.init(0)
	j.tailRuns.scanned = end
	j.ckptEnd = end
	return nil
}

// readAt reads the journal's bytes at its offsets, from whichever segments hold them.
func (j *Journal) readAt(b []byte, off int64) error {
	for len(b) > 0 {
		if off >= j.tailBase {
			return j.appendFile.readAt(b, off-j.tailBase)
		}
		i := sort.Search(len(j.sealed), func(i int) bool { return j.sealed[i].base+j.sealed[i].size > off })
		if i == len(j.sealed) || j.sealed[i].base > off {
			return fmt.Errorf("journal: %s holds no segment at byte %d", j.dir, off)
		}
		f, err := j.reader(i)
		if err != nil {
			return err
		}
		seg := j.sealed[i]
		n := min(int64(len(b)), seg.base+seg.size-off)
		if err := readAt(f, b[:n], off-seg.base); err != nil {
			return fmt.Errorf("journal: read %s at byte %d: %w", f.Name(), off-seg.base, err)
		}
		b, off = b[n:], off+n
	}
	return nil
}

// reader opens sealed segment i for reading, or takes the one kept from the last read, and checks
// that the segment still has the size it was sealed at: another program's append to a sealed
// segment is found when the segment is read.
func (j *Journal) reader(i int) (*os.File, error) {
	if j.rdIdx != i {
		if j.rd != nil {
			j.rd.Close()
			j.rd, j.rdIdx = nil, -1
		}
		f, err := os.Open(filepath.Join(j.dir, segmentName(j.sealed[i].base)))
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		j.rd, j.rdIdx = f, i
	}
	st, err := j.rd.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if seg := j.sealed[i]; st.Size() != seg.size {
		return nil, fmt.Errorf("%w: sealed segment %s is %d bytes, it was sealed at %d: %w",
			ErrModified, j.rd.Name(), st.Size(), seg.size, outbox.ErrSinkRefused)
	}
	return j.rd, nil
}

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
