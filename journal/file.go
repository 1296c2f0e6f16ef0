// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/textmachine/outbox/internal/filekind"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/textmachine/outbox/internal/dirsync"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

// errHeld: another File holds the lock. OpenFile turns it into ErrLocked; it never leaves the package.
var errHeld = errors.New("lock held")

// tailLen is how many of the file's last bytes a File remembers, to recognise the file before each
// append.
const tailLen = 64

// File is a journal file opened for appending. It is the outbox's file sink: Append checks each line's
// key, writes a batch and fdatasyncs it, or leaves the file as it was. A File holds an exclusive lock
// on its path while open. Its methods are safe for concurrent use.
type File struct {
	runLog
	mu sync.Mutex
	appendFile
}

// appendFile is a journal file appended to: a File's, or a Journal's last segment.
type appendFile struct {
	path   string
	f      *os.File
	size   int64  // the length of the file's complete, synced content
	tail   []byte // its last bytes (up to tailLen)
	failed error
	ops    fileOps
}

// readAt reads the file's bytes; a File's offsets are its file's.
func (a *appendFile) readAt(b []byte, off int64) error {
	if err := readAt(a.f, b, off); err != nil {
		return fmt.Errorf("journal: read %s at byte %d: %w", a.path, off, err)
	}
	return nil
}

// fileOps is the file system under a File, replaceable so tests can inject I/O errors and power loss.
type fileOps interface {
	WriteAt(f *os.File, b []byte, off int64) (int, error)
	Truncate(f *os.File, size int64) error
	Datasync(f *os.File) error
}

type osOps struct{}

func (osOps) WriteAt(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }
func (osOps) Truncate(f *os.File, size int64) error                { return f.Truncate(size) }
func (osOps) Datasync(f *os.File) error                            { return datasync(f) }

// OpenFile opens the journal at path for appending, creating it (and syncing its directory) if it is
// missing. A file that is not a journal is refused with ErrNotJournal and left as it was: an empty
// file is a journal, any other must begin and end with journal lines (see ErrNotJournal). OpenFile
// takes an exclusive lock on the file, failing with ErrLocked when another File, in this process or
// another, has it open. A path that names a directory, a FIFO, a device or a socket is refused with
// ErrNotJournal before anything opens it, so OpenFile never blocks on a FIFO; so is a path named as
// a segment of a journal directory (%020d.jsonl), which only the directory's Journal writes. A last
// line without its newline was never acknowledged: OpenFile cuts it off, so the next append cannot
// glue itself to half a line.
func OpenFile(path string) (*File, error) {
	return openFile(path, osOps{})
}

func openFile(path string, ops fileOps) (*File, error) {
	// A segment is written only by the Journal that holds its directory's lock: appended to as a
	// file, a sealed one no longer ends where the next begins (the directory stops opening), and the
	// last one takes lines beside that Journal, whose lock is the directory's, not the segment's.
	if _, ok := parseBase(filepath.Base(path), segmentExt); ok {
		return nil, fmt.Errorf("%w: %s is named as a segment of the journal directory %s, which is opened as a whole, never one segment; it was not opened", ErrNotJournal, path, filepath.Dir(path))
	}
	f, created, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	// Looked at before the lock too, so that a file that is not a journal is never locked.
	if _, err := inspect(f); err != nil {
		f.Close()
		return nil, inspectError(path, err)
	}
	if err := lock(f); err != nil {
		f.Close()
		if errors.Is(err, errHeld) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("journal: lock %s: %w", path, err)
	}
	if created {
		if err := syncDir(filepath.Dir(path)); err != nil {
			unlock(f)
			return nil, err
		}
	}
	// Again under the lock: the file may have changed in between.
	end, err := inspect(f)
	if err != nil {
		unlock(f)
		return nil, inspectError(path, err)
	}
	if end.size != end.complete {
		if err := ops.Truncate(f, end.complete); err != nil {
			unlock(f)
			return nil, fmt.Errorf("journal: cut the torn tail of %s: %w", path, err)
		}
		if err := ops.Datasync(f); err != nil {
			unlock(f)
			return nil, fmt.Errorf("journal: sync %s after cutting its torn tail: %w", path, err)
		}
	}
	j := &File{appendFile: appendFile{path: path, f: f, size: end.complete, tail: end.tail, ops: ops}}
	j.name, j.src = path, &j.appendFile
	j.runs.init(j.size)
	return j, nil
}

// openRegular opens path read-write, creating it when it is missing, only if it is a regular file.
// What else a path can name is refused before it is opened: opening a FIFO blocks until a writer
// comes, and opening a device can act on it (a tape rewinds, a terminal becomes the controlling
// one). The open itself does not block (O_NONBLOCK), in case the path was replaced in between, and
// the file opened is checked again to be the regular file looked at.
func openRegular(path string) (*os.File, bool, error) {
	st, statErr := os.Stat(path)
	if statErr == nil && !st.Mode().IsRegular() {
		return nil, false, notRegular(path, st.Mode())
	}
	created := errors.Is(statErr, os.ErrNotExist)
	// No O_APPEND: writes go to the offset this File tracks, so a failed write can be cut back exactly.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|openNonblock, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("journal: open %s: %w", path, err)
	}
	fst, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, false, fmt.Errorf("journal: stat %s: %w", path, err)
	case !fst.Mode().IsRegular():
		f.Close()
		return nil, false, notRegular(path, fst.Mode())
	case statErr == nil && !os.SameFile(st, fst):
		f.Close()
		return nil, false, fmt.Errorf("journal: open %s: the path was replaced while it was opened", path)
	}
	if err := setBlocking(f); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("journal: open %s: %w", path, err)
	}
	return f, created, nil
}

func notRegular(path string, mode os.FileMode) error {
	if k := filekind.Of(mode); k != "not a regular file" {
		return fmt.Errorf("%w: %s is %s, not a regular file; it was not opened", ErrNotJournal, path, k)
	}
	return fmt.Errorf("%w: %s is not a regular file; it was not opened", ErrNotJournal, path)
}

func inspectError(path string, err error) error {
	var nj *notJournal
	if errors.As(err, &nj) {
		return fmt.Errorf("%w: %s: %s", ErrNotJournal, path, nj.reason)
	}
	return fmt.Errorf("journal: read the ends of %s: %w", path, err)
}

// Path returns the file's path.
func (j *File) Path() string { return j.path }

// Append writes lines, each followed by a newline, after the file's last complete line, then
// fdatasyncs. It returns nil only when all of them are durable. A failed or short write is truncated
// back, so the file never holds part of a batch. After a failed fdatasync the file is not trusted
// (the kernel may have dropped the dirty pages and reported the error once): every later Append
// returns ErrFailed until the file is reopened. A write refused for lack of space returns an error
// that errors.Is syscall.ENOSPC.
//
// Before anything is written, Append refuses, with an error wrapping outbox.ErrSinkRefused:
//   - a line that is empty, holds a newline, does not begin with '{', or is longer than
//     outbox.DefaultMaxLineSize (these wrap outbox.ErrInvalidLine too);
//   - a line that is not a journal line (ErrMalformed), or whose own engine_run_id is not runID or
//     whose own seq is not its EventLine.Seq;
//   - a batch that would leave a gap (ErrStreamGap): its seqs are not consecutive, or its first seq is
//     more than one past the run's last seq in the journal (a run the journal does not hold must
//     start at 1). A batch that starts at or before the run's last seq is a re-delivery and is
//     appended, once each of its lines the journal holds is found to have the same bytes there;
//   - a batch with a line the journal holds with other bytes (ErrPayloadConflict), wherever in the
//     file that copy is: a run's first batch too, when the journal already holds a run of that id
//     (another book's engine that named its run the same);
//   - any batch when the file no longer ends where this File left it (ErrModified).
//
// The first Append or LastSeq after OpenFile reads the whole file once, to index where each run's
// lines are; later calls read only the lines a re-delivery is compared with. The read stops with
// ctx's error when ctx is done (it is checked at every MiB), or when Close is called, and the next
// call takes it up where it stopped.
func (j *File) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	return appendBatch(ctx, &j.mu, &j.runLog, &j.appendFile, j.index, runID, lines, func(buf []byte) error {
		off := j.size
		if err := j.appendSynced(buf); err != nil {
			return err
		}
		j.runs.noteAppended(runID, lines, off)
		j.runs.scanned = j.size
		return nil
	})
}

// appendBatch is an append as File and Journal make it: the batch's bytes, then under mu the checks
// (checkBatch, with index the File's or the Journal's own), then write, which writes the bytes and
// notes where the batch went. A batch of no lines writes nothing.
func appendBatch(ctx context.Context, mu *sync.Mutex, rl *runLog, af *appendFile, index func(context.Context) error,
	runID string, lines []outbox.EventLine, write func(buf []byte) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	buf, err := batchBytes(runID, lines)
	if err != nil || buf == nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if err := checkBatch(ctx, rl, af, index, runID, lines, buf); err != nil {
		return err
	}
	return write(buf)
}

// index builds the run index, reading the file from where an interrupted build stopped.
func (j *File) index(ctx context.Context) error {
	return j.scanInto(ctx, &j.runs, j.size)
}

// appendSynced writes buf after the complete content and fdatasyncs it, or leaves the file as it
// was (or, when that fails too, marks it failed).
func (a *appendFile) appendSynced(buf []byte) error {
	if err := a.write(buf); err != nil {
		if terr := a.ops.Truncate(a.f, a.size); terr != nil {
			a.failed = terr
			return fmt.Errorf("journal: append to %s: %w (and the truncate back failed: %v)", a.path, err, terr)
		}
		return fmt.Errorf("journal: append to %s: %w", a.path, err)
	}
	faultpoint.Hit(faultpoint.JournalBeforeSync)
	if err := a.ops.Datasync(a.f); err != nil {
		// The batch may or may not be on disk, and a second fdatasync could report success for pages
		// the kernel already dropped. Cut the batch back (best effort) and refuse further appends: the
		// relay re-sends the batch to a reopened file, where it is new or a byte-identical duplicate.
		a.failed = err
		a.ops.Truncate(a.f, a.size)
		return fmt.Errorf("journal: fdatasync %s: %w", a.path, err)
	}
	a.size += int64(len(buf))
	a.tail = appendTail(a.tail, buf)
	return nil
}

// LastSeq returns the highest seq of runID's lines in the journal, or 0 when it holds none. It is
// LastSeqContext without a context: the whole-file read of the first call stops only for Close.
func (j *File) LastSeq(runID string) (int64, error) {
	return j.LastSeqContext(context.Background(), runID)
}

// LastSeqContext returns the highest seq of runID's lines in the journal, or 0 when it holds none.
// The first call after OpenFile (or the first Append) reads the whole file once, to index it; it
// stops with ctx's error when ctx is done, or when Close is called, and the next call takes it up
// where it stopped.
func (j *File) LastSeqContext(ctx context.Context, runID string) (int64, error) {
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

func (j *appendFile) usable() error {
	if j.f == nil {
		return fmt.Errorf("journal: %s: file closed", j.path)
	}
	if j.failed != nil {
		return fmt.Errorf("%w (%s: %v)", ErrFailed, j.path, j.failed)
	}
	return nil
}

// checkUnmodified checks that the file still ends where the last append left it: its length, and its
// last bytes. A program that appended (or truncated and wrote again) would otherwise have its bytes
// overwritten, or leave a hole of NUL bytes before the next line.
func (j *appendFile) checkUnmodified() error {
	st, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: stat %s: %w", j.path, err)
	}
	// A journal moved away (a log rotation that renames and creates) would take the lines the reader
	// of the path is waiting for.
	if pst, err := os.Stat(j.path); err != nil || !os.SameFile(st, pst) {
		return fmt.Errorf("%w: %s no longer names the file this journal appends to: %w", ErrModified, j.path, outbox.ErrSinkRefused)
	}
	if st.Size() != j.size {
		return fmt.Errorf("%w: %s is %d bytes long, the last append left it at %d: %w",
			ErrModified, j.path, st.Size(), j.size, outbox.ErrSinkRefused)
	}
	var b [tailLen]byte
	got := b[:len(j.tail)]
	if _, err := j.f.ReadAt(got, j.size-int64(len(got))); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("journal: read back the end of %s: %w", j.path, err)
	}
	if !bytes.Equal(got, j.tail) {
		return fmt.Errorf("%w: %s: its last bytes are not the ones last appended: %w", ErrModified, j.path, outbox.ErrSinkRefused)
	}
	return nil
}

// appendTail returns the last tailLen bytes of tail followed by b, in tail's storage.
func appendTail(tail, b []byte) []byte {
	if len(b) >= tailLen {
		return append(tail[:0], b[len(b)-tailLen:]...)
	}
	keep := min(len(tail), tailLen-len(b))
	tail = append(tail[:0], tail[len(tail)-keep:]...)
	return append(tail, b...)
}

// write writes buf at the end of the complete content, splitting it at a fault point when tests arm
// one.
func (j *appendFile) write(buf []byte) error {
	off := j.size
	if faultpoint.Armed() && len(buf) > 1 {
		half := len(buf) / 2
		if err := j.writeAll(buf[:half], off); err != nil {
			return err
		}
		faultpoint.Hit(faultpoint.JournalMidWrite)
		buf, off = buf[half:], off+int64(half)
	}
	return j.writeAll(buf, off)
}

func (j *appendFile) writeAll(buf []byte, off int64) error {
	for len(buf) > 0 {
		n, err := j.ops.WriteAt(j.f, buf, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		buf, off = buf[n:], off+int64(n)
	}
	return nil
}

// batchBytes checks each line's bytes against runID and joins the lines, each followed by a newline,
// in the one buffer an append writes: nil for a batch with no line.
func batchBytes(runID string, lines []outbox.EventLine) ([]byte, error) {
	n := 0
	for _, l := range lines {
		if err := checkLineBytes(runID, l); err != nil {
			return nil, err
		}
		n += len(l.Line) + 1
	}
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, 0, n)
	for _, l := range lines {
		buf = append(append(buf, l.Line...), '\n')
	}
	return buf, nil
}

// checkBatch makes, in their order, the checks an append makes under its lock before it writes: the
// journal is usable, the batch's keys, nothing written by another program, the runs indexed (index,
// the File's or the Journal's own), and the batch continuing its run or repeating it byte for byte.
func checkBatch(ctx context.Context, rl *runLog, af *appendFile, index func(context.Context) error, runID string, lines []outbox.EventLine, buf []byte) error {
	if err := af.usable(); err != nil {
		return err
	}
	if err := rl.checkKeys(runID, lines, buf); err != nil {
		return err
	}
	if err := af.checkUnmodified(); err != nil {
		return err
	}
	if err := index(ctx); err != nil {
		return err
	}
	return rl.checkContinues(ctx, runID, lines)
}

// Close releases the lock and closes the file. Appends after Close fail. A read of the whole file
// under way in another goroutine's Append or LastSeq gives up at its next MiB, so Close does not
// wait for it.
func (j *File) Close() error {
	j.closing.Store(true)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := unlock(j.f)
	j.f = nil
	if err != nil {
		return fmt.Errorf("journal: close %s: %w", j.path, err)
	}
	return nil
}

func syncDir(dir string) error {
	if err := dirsync.Sync(dir); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}
