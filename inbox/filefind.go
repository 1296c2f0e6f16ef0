// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/textmachine/outbox/journal"
)

// ErrFileLost is returned by ApplyFile and FollowFile when the path names another file than the one
// its stored position was taken in (a rotation, or a file replaced) and that file cannot be found in
// the path's directory, by its device and inode or as a copy of what was read of it: the lines after
// the position may be in it, and giving them up silently is not the inbox's call. The error names
// the file and how far it was read. Putting the file back in the directory (under any name) lets the
// source read its last lines and go on; ForgetFile gives them up.
var ErrFileLost = errors.New("inbox: the file being read cannot be found")

// located is where reading goes on: cur from pos, and then, when cur is not the file the path names,
// next from its start.
type located struct {
	cur  *journalFile
	pos  FilePosition
	next *journalFile // nil: cur is the path's file, or the path names no file
	why  string       // what happened to the file since p, for the log; "" when nothing did
}

func (l located) close() {
	l.cur.close()
	if l.next != l.cur {
		l.next.close()
	}
}

// locate finds where to read path's journal on from p, the position consumed so far (nil: nothing).
// open is a file already open from an earlier look (or nil), reused when it is the one needed; locate
// closes whatever it opened and does not use.
//
//   - The path's file is p's file (same device and inode) and still holds what p describes: on from p.
//   - The same file no longer holds it (truncated, cut by a copytruncate, rewritten past its old
//     size): a copy of what it held (a copytruncate's journal.jsonl.1) is read on from p first if one
//     is in the directory; then the file from its start.
//   - The path names another file or none (a rotation, a file replaced): p's file, found by its
//     device and inode or as a copy in the directory, is read to its end, then the path's file from
//     its start. When the path's file begins as p's did (the same journal under another inode:
//     restored, or an edited copy moved over it) it is read from its start. Otherwise ErrFileLost.
//
// A file deleted and another created under its name that gets the same inode number cannot be told
// from a truncation: it is read from its start.
func locate(path string, p *FilePosition, open *journalFile) (l located, err error) {
	opened := []*journalFile{open}
	defer func() {
		closed := map[*journalFile]bool{}
		for _, jf := range opened {
			if jf != nil && !closed[jf] && (err != nil || (jf != l.cur && jf != l.next)) {
				jf.close()
				closed[jf] = true
			}
		}
	}()
	pf, err := openPath(path, open)
	if err != nil {
		return located{}, err
	}
	opened = append(opened, pf)
	if p == nil {
		if pf == nil {
			return located{}, fmt.Errorf("inbox: open %s: %w", path, fs.ErrNotExist)
		}
		return located{cur: pf, pos: pf.start()}, nil
	}
	if pf != nil && pf.dev == p.Device && pf.ino == p.Inode {
		ok, err := pf.holds(*p)
		if err != nil {
			return located{}, err
		}
		if ok {
			return located{cur: pf, pos: at(pf, *p)}, nil
		}
		c, err := findCopy(path, *p, pf, open)
		if err != nil {
			return located{}, err
		}
		if c != nil {
			opened = append(opened, c)
			return located{cur: c, pos: at(c, *p), next: pf,
				why: "the journal was cut under its position; reading the rest of a copy of it first, then the journal from its start"}, nil
		}
		// Looked at again as a whole: what it holds now may not be a journal (NUL bytes where a
		// writer went on at its old offset after a truncation).
		if err := journal.Inspect(pf.f); err != nil {
			return located{}, err
		}
		return located{cur: pf, pos: pf.start(),
			why: "the journal no longer holds what was read of it (truncated or rewritten); reading it again from its start"}, nil
	}
	old, err := findByID(path, *p, open)
	if err == nil && old == nil {
		old, err = findCopy(path, *p, pf, open)
	}
	if err != nil {
		return located{}, err
	}
	if old != nil {
		opened = append(opened, old)
		return located{cur: old, pos: at(old, *p), next: pf,
			why: "the path names another file (rotated or replaced), or none; reading the file it named to its end first"}, nil
	}
	if pf != nil {
		ok, err := pf.sameJournal(*p)
		if err != nil {
			return located{}, err
		}
		if ok {
			return located{cur: pf, pos: pf.start(), why: "the journal was replaced by another copy of itself; reading it again from its start"}, nil
		}
	}
	return located{}, fmt.Errorf("%w: %s was being read from %s, read to byte %d (device %d, inode %d), and no file in %s is it any more",
		ErrFileLost, path, quotePath(p.Path), p.Offset, p.Device, p.Inode, filepath.Dir(path))
}

// at is p in jf, under jf's name.
func at(jf *journalFile, p FilePosition) FilePosition {
	p.Path = jf.name
	return p
}

// openPath opens the file path names, nil when it names none; open is reused when it is that file.
func openPath(path string, open *journalFile) (*journalFile, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if open != nil && open.sameID(st) {
		return open, nil
	}
	jf, err := openJournalFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // gone between the two looks: a rotation under way
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !isNotJournal(err) {
		err = fmt.Errorf("inbox: %w", err)
	}
	return jf, err
}

// findByID looks for p's file by its device and inode: open if it is that file, then p's own name,
// then every name in path's directory. It returns nil when none is p's file or when the one that is
// no longer holds what p describes (its inode went to another file).
func findByID(path string, p FilePosition, open *journalFile) (*journalFile, error) {
	if open != nil && open.dev == p.Device && open.ino == p.Inode {
		if ok, err := open.holds(p); ok || err != nil {
			return open, err
		}
		return nil, nil
	}
	dir := filepath.Dir(path)
	try := func(name string) (*journalFile, bool, error) {
		st, err := os.Lstat(name)
		if err != nil || !st.Mode().IsRegular() {
			return nil, false, nil
		}
		if dev, ino := fileID(st); dev != p.Device || ino != p.Inode {
			return nil, false, nil
		}
		jf, err := openJournalFile(name)
		if err != nil || !jf.sameID(st) {
			jf.close()
			return nil, true, nil // not a journal now, or replaced between the looks: not p's file
		}
		ok, err := jf.holds(p)
		if !ok || err != nil {
			jf.close()
			return nil, true, err
		}
		return jf, true, nil
	}
	if filepath.Dir(p.Path) == dir && p.Path != path {
		if jf, found, err := try(p.Path); found || err != nil {
			return jf, err
		}
	}
	names, err := dirNames(dir)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if n == path || n == p.Path {
			continue
		}
		if jf, found, err := try(n); found || err != nil {
			return jf, err
		}
	}
	return nil, nil
}

// findCopy looks in path's directory, among the names that begin with path's own (journal.jsonl.1,
// journal.jsonl-20261201), for a file other than skip that holds what p describes and more after it:
// a copy taken before the original was cut (a copytruncate), or the file moved by copying.
func findCopy(path string, p FilePosition, skip ...*journalFile) (*journalFile, error) {
	names, err := dirNames(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	base := filepath.Base(path)
next:
	for _, n := range names {
		if n == path || !strings.HasPrefix(filepath.Base(n), base) {
			continue
		}
		st, err := os.Lstat(n)
		if err != nil || !st.Mode().IsRegular() || st.Size() <= p.Offset {
			continue
		}
		for _, s := range skip {
			if s != nil && s.sameID(st) {
				continue next
			}
		}
		jf, err := openJournalFile(n)
		if err != nil {
			continue // not a journal, or gone: not a copy
		}
		ok, err := jf.holds(p)
		if err != nil || !ok {
			jf.close()
			if err != nil {
				return nil, err
			}
			continue
		}
		return jf, nil
	}
	return nil, nil
}

// dirNames lists the absolute names in dir, sorted.
func dirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: list %s: %w", dir, err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = filepath.Join(dir, e.Name())
	}
	return names, nil
}

func isNotJournal(err error) bool { return errors.Is(err, journal.ErrNotJournal) }

// quotePath is a path as it goes into a message: as it is when it is printable, quoted when not.
func quotePath(p string) string {
	if !utf8.ValidString(p) {
		return fmt.Sprintf("%q", p)
	}
	for _, r := range p {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0xfffd || unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}
