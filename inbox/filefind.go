// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/textmachine/outbox/journal"
)

// located is where reading goes on: cur from pos, and then, when cur is not the file the path names,
// next from its start.
type located struct {
	cur  *journalFile
	pos  FilePosition
	next *journalFile // nil: cur is the path's file, or the path names no file
	// between: next is not the path's file but one rotated after cur and before it (the journal was
	// rotated more than once since cur was read): once next is read, where to go on is looked for again.
	between bool
	why     string // what happened to the file since p, for the log; "" when nothing did
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
//     size or in place): a copy of what it held (a copytruncate's journal.jsonl.1) is read first if
//     one is in the directory; then the file from its start.
//   - The path names another file or none (a rotation, a file replaced): p's file, found by its
//     device and inode or as a copy in the directory, is read to its end, then the path's file from
//     its start. When the path's file begins as p's did (the same journal under another inode:
//     restored, or an edited copy moved over it) it is read from its start. Otherwise ErrFileLost.
//
// A file is p's when it has p's fingerprint and, at p's offset, the end of p's last line (the
// anchors). Reading goes on from p only in a file that also proves it holds everything before p's
// offset (the digest p.Prefix); a file that has the anchors but not the prefix (rewritten under
// them), or whose prefix p cannot prove (a position of the first encoding), is read from its start.
// With whole (a source rewound by Release or AcceptGap) the file found is read from its start too:
// everything p had read is read again, and everything it still needed.
//
// A file deleted and another created under its name that gets the same inode number cannot be told
// from a truncation: it is read from its start.
//
// When the path names another file than p's, p's file is read first, then any file rotated after it
// and before the path's file (see findBetween): done names the files this call has read already,
// which are not read again.
func locate(path string, p *FilePosition, open *journalFile, whole bool, done map[fileID2]bool) (l located, err error) {
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
	f := finder{path: path, p: *p, pf: pf, open: open, whole: whole, done: done}
	l, err = f.find()
	if err != nil {
		return located{}, err
	}
	opened = append(opened, l.cur, l.next)
	if whole {
		l.pos = l.cur.start() // so it is already: the anchors alone never read on from p
		why := "the source was rewound (Release or AcceptGap); reading again from the start of the file its position names"
		if l.why != "" {
			why += "; " + l.why
		}
		l.why = why
	}
	return l, nil
}

// match is how much of what a position describes a file holds.
type match int

const (
	none    match = iota
	anchors       // the fingerprint and the last line at the offset: the file the position was taken in, read from its start
	proven        // and the digest of everything before the offset: read on from the offset
)

// finder is one search of locate's.
type finder struct {
	path     string
	p        FilePosition
	pf, open *journalFile
	whole    bool // the prefix is not needed: the file found is read from its start
	done     map[fileID2]bool
}

// holds is how much of f.p jf holds; the prefix is read only when the anchors are there.
func (f *finder) holds(jf *journalFile) (match, error) {
	ok, err := jf.holds(f.p)
	if !ok || err != nil {
		return none, err
	}
	if f.whole {
		return anchors, nil
	}
	if ok, err = jf.provesPrefix(f.p); !ok || err != nil {
		return anchors, err
	}
	return proven, nil
}

// from is where to read jf from, given what it holds of f.p.
func (f *finder) from(jf *journalFile, m match) FilePosition {
	if m == proven {
		return positionIn(jf, f.p)
	}
	return jf.start()
}

// unproven is why a file that has f.p's anchors, but not its prefix, is read from its start.
func (f *finder) unproven(m match, why string) string {
	switch {
	case m == proven || f.whole:
		return why
	case !f.p.proven():
		return why + "; the stored position has no digest of what was read before it, so the file is read from its start"
	default:
		return why + "; the file no longer holds what was read before the position (rewritten), so it is read from its start"
	}
}

func (f *finder) find() (located, error) {
	p, pf := f.p, f.pf
	if pf != nil && pf.dev == p.Device && pf.ino == p.Inode {
		m, err := f.holds(pf)
		if err != nil {
			return located{}, err
		}
		if m == proven {
			return located{cur: pf, pos: positionIn(pf, p)}, nil
		}
		if m == anchors && f.whole {
			return located{cur: pf, pos: pf.start()}, nil // read again from its start anyway
		}
		c, cm, err := f.findCopy(pf, f.open)
		if err != nil {
			return located{}, err
		}
		if c != nil {
			return f.readBetweenNext(located{cur: c, pos: f.from(c, cm), next: pf,
				why: f.unproven(cm, "the journal was cut under its position, or rewritten; reading a copy of it first, then the journal from its start")})
		}
		// Looked at again as a whole: what it holds now may not be a journal (NUL bytes where a
		// writer went on at its old offset after a truncation).
		if err := journal.Inspect(pf.f); err != nil {
			return located{}, err
		}
		return located{cur: pf, pos: pf.start(),
			why: "the journal no longer holds what was read of it (truncated or rewritten); reading it again from its start"}, nil
	}
	old, m, err := f.findByID()
	if err == nil && old == nil {
		old, m, err = f.findCopy(pf, f.open)
	}
	if err != nil {
		return located{}, err
	}
	if old != nil {
		return f.readBetweenNext(located{cur: old, pos: f.from(old, m), next: pf,
			why: f.unproven(m, "the path names another file (rotated or replaced), or none; reading the file it named to its end first")})
	}
	if pf != nil {
		ok, err := pf.sameJournal(p)
		if err != nil {
			return located{}, err
		}
		if ok {
			return located{cur: pf, pos: pf.start(), why: "the journal was replaced by another copy of itself; reading it again from its start"}, nil
		}
	}
	return located{}, fmt.Errorf("%w: %s was being read from %s, read to byte %d (device %d, inode %d), and no file in %s is it any more",
		ErrFileLost, f.path, quotePath(p.Path), p.Offset, p.Device, p.Inode, placeDirs(f.path))
}

// readBetweenNext has l read, after l.cur, a file rotated after it and before the path's (see findBetween)
// when there is one, instead of going on to the path's file.
func (f *finder) readBetweenNext(l located) (located, error) {
	mid, err := f.findBetween(l.cur, f.pf)
	if err != nil {
		l.cur.close()
		return located{}, err
	}
	if mid != nil {
		l.next, l.between = mid, true
		l.why += "; then " + quotePath(mid.name) + ", rotated after it"
	}
	return l, nil
}

// fileID2 is a file's device and inode.
type fileID2 [2]uint64

// findBetween looks, among the names a rotation gives (the path's own, a separator, a suffix, where
// the path's file really is and beside the path), for a journal file rotated after old and before
// the path's file: one that is neither of them, that this call has not read (done), and that was
// last written no earlier than old was. Without it a journal rotated twice while the source was
// stopped (or between two looks of a follower) would go on from old to the path's file, and the
// lines only in the file between them would be lost without a word. The earliest written is
// returned, nil when there is none. A file older than old that shares its last write's time is read
// too: its lines come back as duplicates. Where the system gives files no inode, none is looked for.
func (f *finder) findBetween(old, pf *journalFile) (*journalFile, error) {
	if old.dev == 0 && old.ino == 0 {
		return nil, nil
	}
	ost, err := old.f.Stat()
	if err != nil {
		return nil, fmt.Errorf("inbox: stat %s: %w", old.name, err)
	}
	var best *journalFile
	var bestAt time.Time
	looked := map[string]bool{}
	for _, place := range places(f.path) {
		names, err := dirNames(filepath.Dir(place))
		if err != nil {
			best.close()
			return nil, err
		}
		base := filepath.Base(place)
		for _, n := range names {
			if n == place || looked[n] || !rotationName(base, filepath.Base(n)) {
				continue
			}
			looked[n] = true
			st, err := os.Lstat(n)
			if err != nil || !st.Mode().IsRegular() || st.ModTime().Before(ost.ModTime()) {
				continue
			}
			if best != nil && !st.ModTime().Before(bestAt) {
				continue
			}
			dev, ino := fileID(st)
			if old.sameID(st) || (pf != nil && pf.sameID(st)) || f.done[fileID2{dev, ino}] {
				continue
			}
			jf, err := openJournalFile(n)
			if err != nil || !jf.sameID(st) {
				jf.close()
				continue // not a journal (compressed, another kind of file), or gone meanwhile
			}
			best.close()
			best, bestAt = jf, st.ModTime()
		}
	}
	return best, nil
}

// rotationName reports whether name is one a rotation gives a file named base: base followed by a
// separator and a suffix (journal.jsonl.1, journal.jsonl-20261201, journal.jsonl_old), not another
// file that only begins like it (journal.jsonl2), which may be another engine's journal. A file
// taken as rotated between two others is read with no proof that it is the journal's (no position
// was ever taken in it), so the rule is stricter than for a copy, which must hold a position's
// anchors.
func rotationName(base, name string) bool {
	rest, ok := strings.CutPrefix(name, base)
	return ok && len(rest) > 1 && strings.ContainsRune(".-_", rune(rest[0]))
}

// positionIn is p in jf, under jf's name.
func positionIn(jf *journalFile, p FilePosition) FilePosition {
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
