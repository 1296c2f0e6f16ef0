package inbox

import (
	"fmt"
	"strings"
)

// FileBehind returns how many bytes of a file source's journal are still to be read: from its
// stored position to the end of the file the path names now, counting first the rest of a rotated
// file that reading still has to finish (or of a copy left by a copytruncate), exactly as ApplyFile
// would find them. name is the source's name (FileSourcePrefix and the followed path) and pos its
// stored position (Source.Position; nil: the file is read from its start, so all of it is behind).
// A last line without its newline counts: it is in the file, not yet read.
//
// It only opens the files for reading. A path that names no file is an error wrapping
// fs.ErrNotExist; a file read from that can no longer be found is ErrFileLost; a file that is not a
// journal is journal.ErrNotJournal.
func FileBehind(name string, pos []byte) (int64, error) {
	path, ok := strings.CutPrefix(name, FileSourcePrefix)
	if !ok {
		return 0, fmt.Errorf("inbox: source %s is not a file source", quotePath(name))
	}
	if err := checkPositionPath(path); err != nil {
		return 0, fmt.Errorf("inbox: source %s: %w", quotePath(name), err)
	}
	var p *FilePosition
	if pos != nil {
		fp, err := ParseFilePosition(pos)
		if err != nil {
			return 0, fmt.Errorf("%w (the position stored for %s)", err, quotePath(path))
		}
		p = &fp
	}
	l, err := locate(path, p, nil)
	if err != nil {
		return 0, err
	}
	defer l.close()
	size, err := l.cur.size()
	if err != nil {
		return 0, err
	}
	behind := max(size-l.pos.Offset, 0)
	if l.next != nil && l.next != l.cur {
		n, err := l.next.size()
		if err != nil {
			return 0, err
		}
		behind += n
	}
	return behind, nil
}
