// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// FileBehind returns how many bytes of the journal at path a file source standing at pos has not
// read: what follows pos in the file it was reading, plus the whole of the file the path names now
// when that is another one (a rotation not yet followed), and of every file rotated between the two
// (the journal files named as a rotation names it, journal.jsonl.1, last written no earlier than
// pos's file, which the source reads before the path's). A file now shorter than pos counts whole,
// since it is read again from its start. It looks at the files' sizes and identities only, never
// at their content or the inbox's database, so it is cheap enough for every scrape of a metric. The
// file pos was taken in is looked for by its device and inode in the directory where the path's file
// really is (the end of a chain of symbolic links) and in the path's own; when it is not there, only
// the path's file counts, and found is false.
func FileBehind(path string, pos FilePosition) (behind int64, found bool, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return 0, false, err
	}
	rest := func(st fs.FileInfo) int64 {
		if st.Size() < pos.Offset {
			return st.Size()
		}
		return st.Size() - pos.Offset
	}
	st, err := os.Stat(abs)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, false, err
	}
	if err == nil {
		if dev, ino := fileID(st); dev == pos.Device && ino == pos.Inode {
			return rest(st), true, nil
		}
		behind = st.Size()
	}
	var old fs.FileInfo
	var others []fs.FileInfo // the other files a rotation names, some perhaps between old and the path's
	looked := map[string]bool{}
	for _, place := range places(abs) {
		names, err := dirNames(filepath.Dir(place))
		if err != nil {
			return behind, false, err
		}
		base := filepath.Base(place)
		for _, n := range names {
			ost, err := os.Lstat(n)
			if err != nil || n == place || looked[n] || !ost.Mode().IsRegular() {
				continue
			}
			looked[n] = true
			dev, ino := fileID(ost)
			switch {
			case dev == pos.Device && ino == pos.Inode:
				if old == nil {
					old = ost
				}
			case rotationName(base, filepath.Base(n)) && (st == nil || !os.SameFile(st, ost)):
				others = append(others, ost)
			}
		}
	}
	if old == nil {
		return behind, false, nil
	}
	behind += rest(old)
	if pos.Device != 0 || pos.Inode != 0 {
		for _, o := range others {
			if !o.ModTime().Before(old.ModTime()) {
				behind += o.Size()
			}
		}
	}
	return behind, true, nil
}
