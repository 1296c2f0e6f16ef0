// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// A reader of a journal directory registers the position it has committed, one small file per reader
// in the journal's directory (NAME.reader), written atomically: to a temporary name, synced, renamed,
// and the directory synced. Retention deletes no sealed segment below the lowest registered position
// (WithMaxBytes aside), so a reader's file may lag what the reader has applied (retention keeps
// more), never run ahead of it.
type ReaderInfo struct {
	Name string
	// Position is a journal-wide byte position: the first byte the reader has not applied yet.
	Position int64
	// Updated is when SetReader last wrote the file.
	Updated time.Time
}

const (
	readerExt = ".reader"
	// A reader file's temporary name is NAME.reader.tmp.DIGITS: unique per write, so that two
	// writers of one name never write into one temporary file, and never a reader's or a segment's
	// name (a name ends in .reader; a reader's own name may hold ".reader.tmp.", so the last one
	// splits it).
	readerTmpInfix = ".reader.tmp."
	readerMagic    = "outbox journal reader 1"
	maxReaderName  = 64
	// A reader file is one short line; anything longer is not one.
	maxReaderFile = 256
	// A temporary reader file older than this was left by a crash, not by a write under way.
	staleReaderTmp = 10 * time.Minute
	// faultReaderTmp: a reader's new position is written and synced under its temporary name, not
	// renamed: the file still holds the old one.
	faultReaderTmp = "journal.reader_tmp"
)

// checkReaderName reports whether name can name a reader: the file it names in the directory can
// be nothing else, and cannot leave the directory.
func checkReaderName(name string) error {
	if len(name) == 0 || len(name) > maxReaderName || name[0] == '.' {
		return fmt.Errorf("%w: %q: a reader name is 1 to %d bytes of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'",
			ErrReaderName, name, maxReaderName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: byte %d (%#02x) is not one of A-Z, a-z, 0-9, '.', '_' and '-'", ErrReaderName, name, i, c)
		}
	}
	return nil
}

func readerFileName(name string) string { return name + readerExt }

// parseReaderFileName returns the reader a directory entry's name is the file of.
func parseReaderFileName(file string) (string, bool) {
	name, ok := strings.CutSuffix(file, readerExt)
	return name, ok && checkReaderName(name) == nil
}

// parseReaderTmpName reports whether a directory entry's name is a reader file's temporary name.
func parseReaderTmpName(file string) bool {
	i := strings.LastIndex(file, readerTmpInfix)
	if i < 0 {
		return false
	}
	digits := file[i+len(readerTmpInfix):]
	return digits != "" && strings.Trim(digits, "0123456789") == "" && checkReaderName(file[:i]) == nil
}

var readerCRC = crc32.MakeTable(crc32.Castagnoli)

// encodeReader renders a reader file: one line of its magic, name, position and update time (ns
// since 1970), then the CRC-32C of what precedes it, so that a torn or foreign file is an error,
// never a position.
func encodeReader(r ReaderInfo) []byte {
	body := fmt.Sprintf("%s %s %d %d", readerMagic, r.Name, r.Position, r.Updated.UnixNano())
	return fmt.Appendf(nil, "%s %08x\n", body, crc32.Checksum([]byte(body), readerCRC))
}

// parseReader reads a reader file strictly: the whole line, its checksum, and the name it records
// matching the file's.
func parseReader(b []byte, name string) (ReaderInfo, error) {
	bad := func(why string) (ReaderInfo, error) {
		return ReaderInfo{}, fmt.Errorf("not a reader file (%s)", why)
	}
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || strings.Contains(line, "\n") {
		return bad("not one whole line")
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 || len(line)-i-1 != 8 {
		return bad("no checksum")
	}
	body := line[:i]
	sum, err := strconv.ParseUint(line[i+1:], 16, 32)
	if err != nil || uint32(sum) != crc32.Checksum([]byte(body), readerCRC) {
		return bad("its checksum does not match")
	}
	rest, ok := strings.CutPrefix(body, readerMagic+" ")
	f := strings.Split(rest, " ")
	if !ok || len(f) != 3 {
		return bad("no header")
	}
	if f[0] != name {
		return bad(fmt.Sprintf("it names reader %q", f[0]))
	}
	pos, err1 := strconv.ParseInt(f[1], 10, 64)
	ns, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || pos < 0 {
		return bad("its numbers do not parse")
	}
	return ReaderInfo{Name: name, Position: pos, Updated: time.Unix(0, ns).UTC()}, nil
}

// SetReader registers reader name in the journal directory dir at position pos (the first byte it
// has not applied), creating or replacing its file; pos may be lower than before (a rewind). The
// file is written to a temporary name, synced, renamed and the directory synced: it holds the old
// position or the new one, never a torn one. A name that is not 1-64 bytes of [A-Za-z0-9._-] not
// starting with '.' is ErrReaderName and writes nothing. dir must exist.
func SetReader(dir, name string, pos int64) error {
	if err := checkReaderName(name); err != nil {
		return err
	}
	if pos < 0 {
		return fmt.Errorf("journal: reader %s: position %d is negative", name, pos)
	}
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("journal: register reader %s: %w", name, err)
	} else if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory; reader %s was not registered", ErrNotJournal, dir, name)
	}
	b := encodeReader(ReaderInfo{Name: name, Position: pos, Updated: time.Now()})
	if err := writeFileAtomic(dir, readerFileName(name), name+readerTmpInfix+"*", b); err != nil {
		return fmt.Errorf("journal: register reader %s: %w", name, err)
	}
	return nil
}

// writeFileAtomic writes b to dir/final through a temporary file named by pattern (os.CreateTemp's,
// whose '*' becomes digits), synced, renamed and the directory synced.
func writeFileAtomic(dir, final, pattern string, b []byte) error {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		faultpoint.Hit(faultReaderTmp)
		err = os.Rename(tmp, filepath.Join(dir, final))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// readReader reads one reader's file; a missing one wraps fs.ErrNotExist, a torn or foreign one
// is an error naming the file.
func readReader(dir, name string) (ReaderInfo, error) {
	path := filepath.Join(dir, readerFileName(name))
	// Looked at before it is opened, without following a link: opening a FIFO waits for a writer,
	// and a link names another directory's reader, which Open refuses as no file of the journal.
	lst, err := os.Lstat(path)
	if err != nil {
		return ReaderInfo{}, fmt.Errorf("journal: reader %s: %w", name, err)
	}
	if !lst.Mode().IsRegular() || lst.Size() > maxReaderFile {
		return ReaderInfo{}, fmt.Errorf("journal: reader file %s: not a reader file (not a regular file of at most %d bytes)", path, maxReaderFile)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return ReaderInfo{}, fmt.Errorf("journal: reader %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ReaderInfo{}, fmt.Errorf("journal: reader %s: %w", name, err)
	}
	if !st.Mode().IsRegular() || st.Size() > maxReaderFile || !os.SameFile(lst, st) {
		return ReaderInfo{}, fmt.Errorf("journal: reader file %s: not a reader file (not a regular file of at most %d bytes)", path, maxReaderFile)
	}
	b := make([]byte, maxReaderFile+1)
	n, _ := f.ReadAt(b, 0)
	r, err := parseReader(b[:n], name)
	if err != nil {
		return ReaderInfo{}, fmt.Errorf("journal: reader file %s: %w", path, err)
	}
	return r, nil
}

// Readers returns the readers registered in the journal directory dir, sorted by name. A reader
// file that is torn, fails its checksum or names another reader is an error naming the file: a
// reader's position is never guessed.
func Readers(dir string) ([]ReaderInfo, error) {
	out, _, err := readReaders(dir)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readReaders reads every reader file in dir; the readers whose file cannot be read are listed in
// bad, and err is the first such file's error (or the directory's).
func readReaders(dir string) (out []ReaderInfo, bad []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: readers: %w", err)
	}
	for _, e := range ents {
		name, ok := parseReaderFileName(e.Name())
		if !ok {
			continue
		}
		r, rerr := readReader(dir, name)
		if errors.Is(rerr, fs.ErrNotExist) {
			continue // removed since the directory was read
		}
		if rerr != nil {
			bad = append(bad, name)
			if err == nil {
				err = rerr
			}
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b ReaderInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, bad, err
}

// RemoveReader removes reader name's registration from the journal directory dir, so that retention
// no longer keeps segments for it. Without force it is refused with ErrReaderBehind while the
// reader's position is below the journal's end (it has lines it has not applied). A reader that is
// not registered is an error wrapping fs.ErrNotExist.
func RemoveReader(dir, name string, force bool) error {
	if err := checkReaderName(name); err != nil {
		return err
	}
	r, err := readReader(dir, name)
	if err != nil && (!force || errors.Is(err, fs.ErrNotExist)) {
		return err
	}
	if !force {
		end, err := journalEnd(dir)
		if err != nil {
			return err
		}
		if r.Position < end {
			return fmt.Errorf("%w: reader %s is at byte %d of %d (%d bytes behind); remove it with force if it is gone for good",
				ErrReaderBehind, name, r.Position, end, end-r.Position)
		}
	}
	if err := os.Remove(filepath.Join(dir, readerFileName(name))); err != nil {
		return fmt.Errorf("journal: remove reader %s: %w", name, err)
	}
	return syncDir(dir)
}

// journalEnd returns the journal-wide position of the end of the journal in dir, from its last
// segment's name and size, without the directory's lock.
func journalEnd(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	last := int64(-1)
	for _, e := range ents {
		if base, ok := parseBase(e.Name(), segmentExt); ok {
			last = max(last, base)
		}
	}
	if last < 0 {
		return 0, nil
	}
	st, err := os.Stat(filepath.Join(dir, segmentName(last)))
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	return last + st.Size(), nil
}
