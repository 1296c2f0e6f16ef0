// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// findByID looks for p's file by its device and inode: open if it is that file, then p's own name,
// then every name in the directory where path's file really is (see places), then in path's own. It
// returns nil when none is p's file or when the one that is no longer has p's anchors (its inode
// went to another file).
func (f *finder) findByID() (*journalFile, match, error) {
	p, open := f.p, f.open
	if open != nil && open.dev == p.Device && open.ino == p.Inode {
		m, err := f.holds(open)
		if m == none || err != nil {
			return nil, none, err
		}
		return open, m, nil
	}
	try := func(name string) (*journalFile, match, bool, error) {
		st, err := os.Lstat(name)
		if err != nil || !st.Mode().IsRegular() {
			return nil, none, false, nil
		}
		if dev, ino := fileID(st); dev != p.Device || ino != p.Inode {
			return nil, none, false, nil
		}
		jf, err := openJournalFile(name)
		if err != nil || !jf.sameID(st) {
			jf.close()
			return nil, none, true, nil // not a journal now, or replaced between the looks: not p's file
		}
		m, err := f.holds(jf)
		if m == none || err != nil {
			jf.close()
			return nil, none, true, err
		}
		return jf, m, true, nil
	}
	for _, place := range places(f.path) {
		dir := filepath.Dir(place)
		if filepath.Dir(p.Path) == dir && p.Path != place {
			if jf, m, found, err := try(p.Path); found || err != nil {
				return jf, m, err
			}
		}
		names, err := dirNames(dir)
		if err != nil {
			return nil, none, err
		}
		for _, n := range names {
			if n == place || n == p.Path {
				continue
			}
			if jf, m, found, err := try(n); found || err != nil {
				return jf, m, err
			}
		}
	}
	return nil, none, nil
}

// findCopy looks in the directory where path's file really is, then in path's own (see places),
// among the names that begin with path's own (journal.jsonl.1, journal.jsonl-20261201), for a file
// other than skip that has p's anchors and more after them: a copy taken before the original was cut
// (a copytruncate), or the file moved by copying. One that proves p's prefix is preferred to one
// that only has the anchors.
func (f *finder) findCopy(skip ...*journalFile) (*journalFile, match, error) {
	var best *journalFile
	var bm match
	for _, place := range places(f.path) {
		jf, m, err := f.findCopyAt(place, skip)
		if err != nil {
			best.close()
			return nil, none, err
		}
		switch {
		case m == proven:
			best.close()
			return jf, m, nil
		case m == anchors && best == nil:
			best, bm = jf, m
			skip = append(skip, jf)
		case jf != nil:
			jf.close()
		}
	}
	return best, bm, nil
}

func (f *finder) findCopyAt(path string, skip []*journalFile) (*journalFile, match, error) {
	names, err := dirNames(filepath.Dir(path))
	if err != nil {
		return nil, none, err
	}
	base := filepath.Base(path)
	var best *journalFile
next:
	for _, n := range names {
		if n == path || !strings.HasPrefix(filepath.Base(n), base) {
			continue
		}
		st, err := os.Lstat(n)
		if err != nil || !st.Mode().IsRegular() || st.Size() <= f.p.Offset {
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
		m, err := f.holds(jf)
		switch {
		case err != nil:
			jf.close()
			best.close()
			return nil, none, err
		case m == proven:
			best.close()
			return jf, m, nil
		case m == anchors && best == nil:
			best = jf
		default:
			jf.close()
		}
	}
	if best != nil {
		return best, anchors, nil
	}
	return nil, none, nil
}

// places are the names under which a journal's rotated files are looked for: where the file
// really is first (the end of a chain of symbolic links: a rotation renames the file in its own
// directory, not beside a link to it), then the path itself when it is a link. A link that names no
// file (its target renamed away, the new one not yet created) still says where the file was.
func places(path string) []string {
	cur := path
	for range 40 { // as the system's own limit on links followed
		st, err := os.Lstat(cur)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			break
		}
		t, err := os.Readlink(cur)
		if err != nil {
			break
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(cur), t)
		}
		cur = filepath.Clean(t)
	}
	if cur == path {
		return []string{path}
	}
	return []string{cur, path}
}

// placeDirs is the directories places names, for a message.
func placeDirs(path string) string {
	var dirs []string
	for _, p := range places(path) {
		dirs = append(dirs, filepath.Dir(p))
	}
	return strings.Join(dirs, " or ")
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
