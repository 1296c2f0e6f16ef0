// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/textmachine/outbox/journal"
)

// journalFile is a journal file open for reading, with the identity it had when it was opened: an
// open file keeps its inode, so it can be read to its end after its name has gone to another file.
type journalFile struct {
	f        *os.File
	name     string // the absolute name it was opened under
	dev, ino uint64
	shared   bool // a shared flock is held on it (a segment of a journal directory)
	meanLine int  // the mean length of the last batch's lines (with their newlines), to size the next read
	// The SHA-256 state of the file's first bytes where reading stands and where the batch read after
	// it ends: each position's Prefix costs only its batch's own bytes, hashed once.
	sums [2]prefixSum
}

// prefixSum is the SHA-256 state of a file's first at bytes; h nil: none.
type prefixSum struct {
	at int64
	h  hash.Hash
}

// readSize is how many bytes to read for the next batch: enough for its lines at the last batch's
// mean length, with a margin, so that a batch of short lines does not read (and allocate) the whole
// byte bound only to use a part of it.
func (jf *journalFile) readSize(b batchBounds) int {
	if jf.meanLine == 0 {
		return b.bytes
	}
	return max(64<<10, b.lines*jf.meanLine+b.lines*jf.meanLine/4)
}

// openJournalFile opens name for reading. It refuses a file that is not a regular file or not a
// journal (journal.ErrNotJournal), with the journal package's own rules.
func openJournalFile(name string) (*journalFile, error) {
	// Looked at before it is opened: opening a FIFO would wait for a writer.
	if st, err := os.Stat(name); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: not a regular file (%s)", journal.ErrNotJournal, name, st.Mode().Type())
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("inbox: stat %s: %w", name, err)
	}
	if err := journal.Inspect(f); err != nil {
		f.Close()
		return nil, err
	}
	dev, ino := fileID(st)
	return &journalFile{f: f, name: name, dev: dev, ino: ino}, nil
}

func (jf *journalFile) close() {
	if jf != nil {
		if jf.shared {
			unlockShared(jf.f)
		}
		jf.f.Close()
	}
}

func (jf *journalFile) size() (int64, error) {
	st, err := jf.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("inbox: stat %s: %w", jf.name, err)
	}
	return st.Size(), nil
}

// sameID reports whether fi is this file.
func (jf *journalFile) sameID(fi os.FileInfo) bool {
	dev, ino := fileID(fi)
	return dev == jf.dev && ino == jf.ino
}

// start is the position before the file's first byte.
func (jf *journalFile) start() FilePosition {
	return FilePosition{Path: jf.name, Device: jf.dev, Inode: jf.ino}
}

// holds reports whether the file's content is what p was taken of: at least p.Offset bytes, the
// first p.FingerprintLen of them with p's fingerprint, and the line that ends at p.Offset (on a line
// boundary) with p's digest. Device and inode are not compared: a copy holds what its original did.
func (jf *journalFile) holds(p FilePosition) (bool, error) {
	size, err := jf.size()
	if err != nil || size < p.Offset {
		return false, err
	}
	if ok, err := jf.sameJournal(p); !ok || err != nil {
		return false, err
	}
	if p.Offset == 0 {
		return true, nil
	}
	// The line, its newline, and the newline before it unless it is the first line.
	start := p.Offset - int64(p.LastLineLen) - 1
	from := max(start-1, 0)
	buf := make([]byte, p.Offset-from)
	if ok, err := jf.readFull(buf, from); !ok || err != nil {
		return false, err
	}
	if start > 0 {
		if buf[0] != '\n' {
			return false, nil
		}
		buf = buf[1:]
	}
	line := buf[:len(buf)-1]
	return buf[len(buf)-1] == '\n' && bytes.IndexByte(line, '\n') < 0 && sha256.Sum256(line) == p.LastLine, nil
}

// readFull reads len(b) bytes at off; false when the file ends before them.
func (jf *journalFile) readFull(b []byte, off int64) (bool, error) {
	n, err := jf.f.ReadAt(b, off)
	if n == len(b) {
		return true, nil
	}
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	return false, fmt.Errorf("inbox: read %s at byte %d: %w", jf.name, off, err)
}

// errCutUnder is a read that found the file shorter than it was a moment before: it was cut while
// being read, and its position must be checked again.
var errCutUnder = errors.New("inbox: the file was cut while being read")

// readAll reads len(b) bytes at off, or fails with errCutUnder.
func (jf *journalFile) readAll(b []byte, off int64) error {
	ok, err := jf.readFull(b, off)
	if err == nil && !ok {
		return fmt.Errorf("%w: %s, at byte %d", errCutUnder, jf.name, off+int64(len(b)))
	}
	return err
}

// batchBounds bound what one call of ApplyFrom is given.
type batchBounds struct {
	lines   int // at most this many lines
	bytes   int // at most about this many bytes of lines (one longer line goes alone)
	maxLine int // a line longer than this, without its newline, is malformed
}

// readBatch reads the complete lines after p, up to end and within b, and returns them with the
// position after the last of them. A line is the bytes before its newline, a '\r' before it included,
// exactly as journal.Verify takes it; the bytes after the last newline (a line the writer may still
// be writing, or cut when it next opens the file) are never taken. No line: p itself.
//
// The lines are slices of one buffer made for them, theirs to keep. A line longer than b.maxLine is
// an error wrapping journal.ErrMalformed, found without reading more than b.maxLine+1 bytes of it.
func (jf *journalFile) readBatch(p FilePosition, end int64, b batchBounds) ([][]byte, FilePosition, error) {
	avail := end - p.Offset
	if avail <= 0 {
		return nil, p, nil
	}
	want := int(min(avail, int64(b.bytes), int64(jf.readSize(b))))
	buf := make([]byte, want)
	if err := jf.readAll(buf, p.Offset); err != nil {
		return nil, p, err
	}
	cut := bytes.LastIndexByte(buf, '\n')
	if cut < 0 {
		if int64(want) == avail && want <= b.maxLine {
			return nil, p, nil // only a line without its newline
		}
		if want < b.bytes && int64(want) < avail && want <= b.maxLine {
			jf.meanLine = 0 // lines longer than the guess: the next read takes a whole batch's bytes
			want = int(min(avail, int64(b.bytes)))
			buf = make([]byte, want)
			if err := jf.readAll(buf, p.Offset); err != nil {
				return nil, p, err
			}
			cut = bytes.LastIndexByte(buf, '\n')
		}
	}
	if cut < 0 {
		// A line as long as a whole batch: read it alone, up to the limit and its newline.
		long := int(min(avail, int64(b.maxLine)+1))
		if long > want {
			buf = make([]byte, long)
			if err := jf.readAll(buf, p.Offset); err != nil {
				return nil, p, err
			}
		}
		cut = bytes.IndexByte(buf, '\n')
		if cut < 0 || cut > b.maxLine {
			if len(buf) > b.maxLine {
				return nil, p, fmt.Errorf("inbox: %s: the line at byte %d is longer than the limit of %d bytes: %w",
					jf.name, p.Offset, b.maxLine, journal.ErrMalformed)
			}
			return nil, p, nil
		}
	}
	data := buf[:cut+1]
	lines := make([][]byte, 0, min(b.lines, bytes.Count(data, []byte{'\n'})))
	used := 0
	for used < len(data) && len(lines) < b.lines {
		i := bytes.IndexByte(data[used:], '\n')
		if i > b.maxLine {
			if len(lines) > 0 {
				break // the lines before it go first, with their position
			}
			return nil, p, fmt.Errorf("inbox: %s: the line at byte %d is longer than the limit of %d bytes: %w",
				jf.name, p.Offset, b.maxLine, journal.ErrMalformed)
		}
		lines = append(lines, data[used:used+i:used+i])
		used += i + 1
	}
	jf.meanLine = used / len(lines)
	next, err := jf.advance(p, lines)
	return lines, next, err
}

// advance is p moved past lines, the next lines of jf after p, its Prefix included: the digest of
// the file's first bytes at p is carried on from the last batch (or, the first time, read).
func (jf *journalFile) advance(p FilePosition, lines [][]byte) (FilePosition, error) {
	next := advance(p, jf.name, lines)
	if len(lines) == 0 {
		return next, nil
	}
	h, err := jf.sumAt(p.Offset)
	if err != nil {
		return p, err
	}
	before := jf.sum(p.Offset)
	for _, l := range lines {
		h.Write(l)
		h.Write(newline)
	}
	h.Sum(next.Prefix[:0])
	jf.sums = [2]prefixSum{{p.Offset, before}, {next.Offset, h}}
	return next, nil
}

var newline = []byte{'\n'}

// sum is the state kept at off, nil when none is.
func (jf *journalFile) sum(off int64) hash.Hash {
	for _, s := range jf.sums {
		if s.h != nil && s.at == off {
			return s.h
		}
	}
	return nil
}

// sumAt returns a SHA-256 state of the file's first off bytes, its own to write on: a copy of the
// one kept, or one read from the file (and kept).
func (jf *journalFile) sumAt(off int64) (hash.Hash, error) {
	if h := jf.sum(off); h != nil {
		return clone(h), nil
	}
	h := sha256.New()
	if off > 0 {
		n, err := io.Copy(h, io.NewSectionReader(jf.f, 0, off))
		if err != nil {
			return nil, fmt.Errorf("inbox: read %s: %w", jf.name, err)
		}
		if n < off {
			return nil, fmt.Errorf("%w: %s, at byte %d", errCutUnder, jf.name, n)
		}
	}
	jf.sums = [2]prefixSum{{off, h}}
	return clone(h), nil
}

// clone is a copy of a SHA-256 state: by hash.Cloner, or, where the build's SHA-256 has none (a
// FIPS 140 module), through its binary encoding, which crypto/sha256 always has.
func clone(h hash.Hash) hash.Hash {
	if c, ok := h.(hash.Cloner); ok {
		if d, err := c.Clone(); err == nil {
			return d
		}
	}
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	d := sha256.New()
	if err == nil {
		err = d.(encoding.BinaryUnmarshaler).UnmarshalBinary(state)
	}
	if err != nil {
		panic(fmt.Errorf("inbox: copy a SHA-256 state: %w", err)) // crypto/sha256 documents both
	}
	return d
}

// provesPrefix reports whether the file's first p.Offset bytes are still those p was taken after:
// their SHA-256 is p.Prefix. It reads them once (a running source keeps the digest as it reads); a
// position without the digest proves nothing.
func (jf *journalFile) provesPrefix(p FilePosition) (bool, error) {
	if p.Offset == 0 {
		return true, nil
	}
	if !p.proven() {
		return false, nil
	}
	h, err := jf.sumAt(p.Offset)
	if errors.Is(err, errCutUnder) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum == p.Prefix, nil
}

// advance is p moved past lines, the next lines of the file named name: the offset after them, the
// last of them, and, from the first line of the file, the fingerprint.
func advance(p FilePosition, name string, lines [][]byte) FilePosition {
	if len(lines) == 0 {
		return p
	}
	next := p
	next.Path = name
	if p.Offset == 0 {
		first := lines[0]
		h := sha256.New()
		if len(first) >= fingerprintSize {
			h.Write(first[:fingerprintSize])
			next.FingerprintLen = fingerprintSize
		} else {
			h.Write(first)
			h.Write([]byte{'\n'})
			next.FingerprintLen = len(first) + 1
		}
		h.Sum(next.Fingerprint[:0])
	}
	for _, l := range lines {
		next.Offset += int64(len(l)) + 1
	}
	last := lines[len(lines)-1]
	next.LastLineLen, next.LastLine = len(last), sha256.Sum256(last)
	return next
}

// sameJournal reports whether the file begins as the one p was taken in: the same journal, though
// perhaps another copy of it, edited or cut further on.
func (jf *journalFile) sameJournal(p FilePosition) (bool, error) {
	if p.FingerprintLen == 0 {
		return true, nil
	}
	buf := make([]byte, p.FingerprintLen)
	if ok, err := jf.readFull(buf, 0); !ok || err != nil {
		return false, err
	}
	return sha256.Sum256(buf) == p.Fingerprint, nil
}
