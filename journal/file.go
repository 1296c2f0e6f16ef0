package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

// errHeld: another File holds the lock.
var errHeld = errors.New("journal: lock held")

// ErrFailed: an earlier Append failed in a way that leaves the file's state unknown (its fdatasync or
// its truncate-back failed). The file takes no more appends; reopen it, which re-checks the tail.
var ErrFailed = errors.New("journal: file failed; reopen it")

// File is a journal file opened for appending. It is the outbox's file sink: Append writes a batch and
// fdatasyncs it, or leaves the file as it was. A File holds an exclusive lock on its path while open.
// Its methods are safe for concurrent use.
type File struct {
	path string

	mu     sync.Mutex
	f      *os.File
	size   int64 // the length of the file's complete, synced content
	failed error
	ops    fileOps
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
// missing. It takes an exclusive lock on the file, failing with ErrLocked when another File, in this
// process or another, has it open. A last line without its newline was never acknowledged: OpenFile
// cuts it off, so the next append cannot glue itself to half a line.
func OpenFile(path string) (*File, error) {
	return openFile(path, osOps{})
}

func openFile(path string, ops fileOps) (*File, error) {
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	// No O_APPEND: writes go to the offset this File tracks, so a failed write can be cut back exactly.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
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
	size, err := completeLength(f)
	if err != nil {
		unlock(f)
		return nil, fmt.Errorf("journal: read the tail of %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		unlock(f)
		return nil, fmt.Errorf("journal: stat %s: %w", path, err)
	}
	if st.Size() != size {
		if err := ops.Truncate(f, size); err != nil {
			unlock(f)
			return nil, fmt.Errorf("journal: cut the torn tail of %s: %w", path, err)
		}
		if err := ops.Datasync(f); err != nil {
			unlock(f)
			return nil, fmt.Errorf("journal: sync %s after cutting its torn tail: %w", path, err)
		}
	}
	return &File{path: path, f: f, size: size, ops: ops}, nil
}

// completeLength returns the length of f up to and including its last newline.
func completeLength(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	buf := make([]byte, 64*1024)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		chunk := buf[:n]
		if _, err := f.ReadAt(chunk, end-n); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// Path returns the file's path.
func (j *File) Path() string { return j.path }

// Append writes lines, each followed by a newline, after the file's last complete line, then
// fdatasyncs. It returns nil only when all of them are durable. A failed or short write is truncated
// back, so the file never holds part of a batch. After a failed fdatasync the file is not trusted
// (the kernel may have dropped the dirty pages and reported the error once): every later Append
// returns ErrFailed until the file is reopened. A line that is empty or holds a newline is refused
// before anything is written.
func (j *File) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := 0
	for _, l := range lines {
		if len(l.Line) == 0 || bytes.IndexByte(l.Line, '\n') >= 0 {
			return fmt.Errorf("journal: line %d: %w", l.Seq, outbox.ErrInvalidLine)
		}
		n += len(l.Line) + 1
	}
	if n == 0 {
		return nil
	}
	buf := make([]byte, 0, n)
	for _, l := range lines {
		buf = append(append(buf, l.Line...), '\n')
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("journal: append to %s: file closed", j.path)
	}
	if j.failed != nil {
		return fmt.Errorf("%w (%s: %v)", ErrFailed, j.path, j.failed)
	}
	if err := j.write(buf); err != nil {
		if terr := j.ops.Truncate(j.f, j.size); terr != nil {
			j.failed = terr
			return fmt.Errorf("journal: append to %s: %w (and the truncate back failed: %v)", j.path, err, terr)
		}
		return fmt.Errorf("journal: append to %s: %w", j.path, err)
	}
	faultpoint.Hit(faultpoint.JournalBeforeSync)
	if err := j.ops.Datasync(j.f); err != nil {
		// The batch may or may not be on disk, and a second fdatasync could report success for pages
		// the kernel already dropped. Cut the batch back (best effort) and refuse further appends: the
		// relay re-sends the batch to a reopened file, where it is new or a byte-identical duplicate.
		j.failed = err
		j.ops.Truncate(j.f, j.size)
		return fmt.Errorf("journal: fdatasync %s: %w", j.path, err)
	}
	j.size += int64(len(buf))
	return nil
}

// write writes buf at the end of the complete content, splitting it at a fault point when tests arm
// one.
func (j *File) write(buf []byte) error {
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

func (j *File) writeAll(buf []byte, off int64) error {
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

// Close releases the lock and closes the file. Appends after Close fail.
func (j *File) Close() error {
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
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("journal: sync directory %s: %w", dir, err)
	}
	return nil
}
