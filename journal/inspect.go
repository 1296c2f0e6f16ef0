// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/textmachine/outbox/outbox"
)

// fileEnd is what OpenFile reads of a journal: where its complete content ends, and its last line.
type fileEnd struct {
	size, complete int64
	lastStart      int64  // where the last complete line starts
	tail           []byte // the last bytes of the complete content (up to tailLen)
}

// Inspect tells whether f, open for reading, is a journal by OpenFile's rules (see ErrNotJournal),
// without locking or changing it: nil for a journal (an empty file is one), an error wrapping
// ErrNotJournal that names the file and why for anything else, or the error of reading it. It reads
// a few lines' worth at the file's ends, whatever its length. A reader of a journal another process
// is appending to uses it to refuse a wrong file before taking any of its lines.
func Inspect(f *os.File) error {
	if _, err := inspect(f); err != nil {
		return inspectError(f.Name(), err)
	}
	return nil
}

// inspect reads the first and the last complete line of f and what follows the last newline, and
// refuses (a *notJournal) a file that is not a journal. It reads at most a few lines' worth, whatever
// the file's length: each line it looks for is found within outbox.DefaultMaxLineSize bytes, or the
// file is not a journal the File wrote.
func inspect(f *os.File) (fileEnd, error) {
	st, err := f.Stat()
	if err != nil {
		return fileEnd{}, err
	}
	if !st.Mode().IsRegular() {
		return fileEnd{}, notJournalf("not a regular file (%s)", st.Mode().Type())
	}
	size := st.Size()
	if size == 0 {
		return fileEnd{}, nil
	}
	const limit = outbox.DefaultMaxLineSize
	for w := min(size, 64<<10); ; w = min(size, 2*w) {
		buf := make([]byte, w)
		base := size - w
		if err := readAt(f, buf, base); err != nil {
			return fileEnd{}, err
		}
		if bytes.IndexByte(buf, 0) >= 0 {
			return fileEnd{}, notJournalf("a NUL byte within its last %d bytes", w)
		}
		p := bytes.LastIndexByte(buf, '\n')
		if p < 0 && base > 0 {
			if w > limit {
				return fileEnd{}, notJournalf("no newline in its last %d bytes", w)
			}
			continue
		}
		torn := buf[p+1:]
		if len(torn) > 0 && torn[0] != '{' {
			return fileEnd{}, notJournalf("its last line has no newline and does not begin with '{'")
		}
		if len(torn) > limit {
			return fileEnd{}, notJournalf("its last line has no newline and is longer than %d bytes", limit)
		}
		if len(torn) > 0 && json.Valid(torn) {
			// Whole, not torn: a line cut short by a crash is never valid JSON. A complete journal
			// line that missed its newline was never acknowledged and goes; anything else is some
			// other file's content (a one-line JSON document), which is not ours to cut.
			if _, _, err := journalLine(torn); err != nil {
				return fileEnd{}, notJournalf("its last line has no newline and is not a journal line: %v", err)
			}
		}
		end := fileEnd{size: size, complete: base + int64(p) + 1}
		if p < 0 {
			return end, nil // only a torn line: an empty journal once it is cut
		}
		q := bytes.LastIndexByte(buf[:p], '\n')
		if q < 0 && base > 0 {
			if p > limit {
				return fileEnd{}, notJournalf("its last complete line is longer than %d bytes", limit)
			}
			continue
		}
		end.lastStart = base + int64(q) + 1
		end.tail = append([]byte(nil), buf[max(0, p+1-tailLen):p+1]...)
		if _, _, err := journalLine(buf[q+1 : p]); err != nil {
			return fileEnd{}, notJournalf("its last complete line (at byte %d) %v", end.lastStart, err)
		}
		if end.lastStart > 0 {
			if err := checkFirstLine(f, end.lastStart); err != nil {
				return fileEnd{}, err
			}
		}
		return end, nil
	}
}

// checkFirstLine checks the line at the start of f, which ends before upTo.
func checkFirstLine(f *os.File, upTo int64) error {
	const limit = outbox.DefaultMaxLineSize
	for w := min(upTo, 64<<10); ; w = min(upTo, 2*w) {
		buf := make([]byte, w)
		if err := readAt(f, buf, 0); err != nil {
			return err
		}
		if bytes.IndexByte(buf, 0) >= 0 {
			return notJournalf("a NUL byte within its first %d bytes", w)
		}
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			if w > limit || w == upTo {
				return notJournalf("its first line is longer than %d bytes", limit)
			}
			continue
		}
		if _, _, err := journalLine(buf[:i]); err != nil {
			return notJournalf("its first line %v", err)
		}
		return nil
	}
}

// notJournal is why inspect refuses a file; OpenFile names the file and ErrNotJournal with it.
type notJournal struct{ reason string }

func (e *notJournal) Error() string { return e.reason }

func notJournalf(format string, args ...any) error {
	return &notJournal{fmt.Sprintf(format, args...)}
}

// journalLine reads a line's key with the verifier's rules.
func journalLine(b []byte) (string, int64, error) {
	var s scanner
	run, seq, w := s.parse(b)
	if w != whyNone {
		return "", 0, fmt.Errorf("is not a journal line: %s", w)
	}
	return string(run), seq, nil
}

func readAt(f *os.File, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) && n < len(b) {
		return fmt.Errorf("read at %d: %w", off, io.ErrUnexpectedEOF)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
