// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// The fault points of an adopt, for tests that write to the file as a program without its lock
// would.
const (
	faultAdoptRead   = "journal.adopt_read"   // the file is read and indexed; it is not moved
	faultAdoptSealed = "journal.adopt_sealed" // the file is moved and sealed; Adopt has not returned
)

// Adopt carries the single-file journal at file over into dir as a segmented journal, with nothing
// lost and the file read once: the file becomes the first segment (00000000000000000000.jsonl),
// moved by a rename, so that every line keeps its position; its index is written from that one
// read, and an empty segment is started after it, so that the next start reads the index and not
// the file. dir must be missing or empty (ErrNotEmpty), and on the file's file system: a rename
// cannot move a file to another, and a copy would read it twice, so that is refused and nothing is
// changed. The file is opened as OpenFile opens it: a file that is not a journal is ErrNotJournal,
// one another writer has open is ErrLocked, and its torn tail is cut; a missing file is an error
// wrapping os.ErrNotExist, and a symbolic link is ErrNotJournal (the rename would move the link).
// A file with more than one name (a hard link) is refused, nothing changed: the other name would go
// on naming the first segment, and whatever appends to or rotates the file by that name would change
// a sealed segment, which the journal then refuses (ErrModified) for good.
//
// Adopt holds the file's lock while it works, which keeps out every writer that takes it (File, an
// engine). A program that writes without it is not kept out: what Adopt can check is that the file
// did not change while it worked. Its size and modification time are taken when it is locked, and
// compared before the move (a change refuses, nothing changed) and once it is sealed (a change puts
// the file back at its path and removes what Adopt made, and says so). An append always changes the
// size; a rewrite in place is seen only when the file system's clock moved the modification time.
// A write after Adopt has returned goes to a sealed segment, which Open then refuses (ErrModified):
// stop every writer of the file before adopting it.
//
// An error once the file is moved says so, and leaves dir a journal that Open takes (at worst with
// the first segment not yet sealed). A crash part way leaves dir a journal that Open takes (at worst
// with the first segment not yet sealed, which the next roll seals), or file where it was and dir
// empty.
func Adopt(ctx context.Context, file, dir string) error {
	if dir == "" || file == "" {
		return errors.New("journal: Adopt: a file and a directory are needed")
	}
	created := false
	switch st, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		created = true
	case err != nil:
		return fmt.Errorf("journal: %w", err)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory; nothing was changed", ErrNotJournal, dir)
	default:
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if len(ents) > 0 {
			return fmt.Errorf("%w: %s holds %q; nothing was changed", ErrNotEmpty, dir, ents[0].Name())
		}
	}
	// OpenFile would create a missing file and follow a link, and the rename below would move the
	// link, not the file: the first segment would be a link, which Open refuses.
	fst, err := os.Lstat(file)
	switch {
	case err != nil:
		return fmt.Errorf("journal: %w; nothing was changed", err)
	case fst.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link: adopt the file it names; nothing was changed", ErrNotJournal, file)
	}
	if err := singleName(file, fst); err != nil {
		return err
	}
	src, err := OpenFile(file)
	if err != nil {
		return err
	}
	defer src.Close()
	locked, err := src.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// The one read: the run index of the whole file.
	if _, err := src.LastSeqContext(ctx, ""); err != nil {
		return err
	}
	end, err := inspect(src.f)
	if err != nil {
		return inspectError(file, err)
	}
	faultpoint.Hit(faultAdoptRead)
	if err := unchanged(file, locked, src.f); err != nil {
		return err
	}
	if created {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("journal: create %s: %w", dir, err)
		}
	}
	dirf, err := os.Open(dir)
	if err == nil {
		err = lock(dirf)
		if err != nil {
			dirf.Close()
		}
	}
	if err != nil {
		if created {
			os.Remove(dir)
		}
		if errors.Is(err, errHeld) {
			return fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return fmt.Errorf("journal: %w", err)
	}
	defer unlock(dirf)
	// Empty still, now that it is locked?
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		if err == nil {
			err = fmt.Errorf("%w: %s holds %q; nothing was changed", ErrNotEmpty, dir, ents[0].Name())
		}
		return err
	}
	// The rename moves whatever the path names now: it must still be the file read.
	sst, err := src.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if st, err := os.Lstat(file); err != nil || !os.SameFile(st, sst) {
		if created {
			os.Remove(dir)
		}
		return fmt.Errorf("journal: %s was replaced while it was read; nothing was changed", file)
	}
	if err := singleName(file, sst); err == nil {
		err = unchanged(file, locked, src.f)
	}
	if err != nil {
		if created {
			os.Remove(dir)
		}
		return err
	}
	first := filepath.Join(dir, segmentName(0))
	if err := os.Rename(file, first); err != nil {
		if created {
			os.Remove(dir)
		}
		if errors.Is(err, syscall.EXDEV) {
			return fmt.Errorf("journal: %s and %s are on different file systems: move the file next to the "+
				"directory first (a copy would read it twice); nothing was changed", file, dir)
		}
		return fmt.Errorf("journal: %w", err)
	}
	// From here on the file is the first segment: a failure must not read as a refusal.
	moved := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("%w; %s was moved to %s, the first segment of a journal that Open takes "+
			"(its next roll seals it)", err, file, first)
	}
	if created {
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return moved(err)
		}
	}
	if err := syncDir(dir); err != nil {
		return moved(err)
	}
	if err := syncDir(filepath.Dir(file)); err != nil {
		return moved(err)
	}
	if src.size == 0 {
		// An empty first segment is the one appended to.
		return undoIfChanged(file, dir, first, created, locked, src.f, nil)
	}
	// Sealed as a roll seals: the index, then the next segment.
	j := &Journal{dir: dir, rdIdx: -1}
	j.name, j.src = dir, j
	j.appendFile = appendFile{path: first, f: src.f, size: src.size}
	sum, _, err := j.lineSum(end.lastStart, src.size)
	if err != nil {
		return moved(err)
	}
	if err := j.writeIndex(segIndexOf(&src.runs, 0, src.size, sst.ModTime().UnixNano(), end.lastStart, sum)); err != nil {
		return moved(err)
	}
	nextPath := filepath.Join(dir, segmentName(src.size))
	next, err := os.OpenFile(nextPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return moved(fmt.Errorf("journal: start the segment after %s: %w", first, err))
	}
	next.Close()
	if err := syncDir(dir); err != nil {
		return moved(err)
	}
	faultpoint.Hit(faultAdoptSealed)
	return undoIfChanged(file, dir, first, created, locked, src.f,
		[]string{filepath.Join(dir, indexName(0)), nextPath})
}

// singleName refuses a file that has other names than the one given.
func singleName(file string, st os.FileInfo) error {
	if n := linkCount(st); n > 1 {
		return fmt.Errorf("journal: %s has %d names (hard links): whatever writes to or rotates it by "+
			"another name would change the first segment once it is sealed; adopt a file with one name "+
			"(remove the others, or adopt a copy); nothing was changed", file, n)
	}
	return nil
}

// unchanged checks that f has the size and modification time it had when it was locked: a program
// that writes to it without taking its lock changes one or both.
func unchanged(file string, locked os.FileInfo, f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if st.Size() != locked.Size() || !st.ModTime().Equal(locked.ModTime()) {
		return fmt.Errorf("journal: %s changed while it was adopted (%d bytes, modified %s; %d bytes, "+
			"modified %s when it was locked): another program writes to it without taking its lock; stop "+
			"it and adopt again; nothing was changed", file, st.Size(), st.ModTime().Format(time.RFC3339Nano),
			locked.Size(), locked.ModTime().Format(time.RFC3339Nano))
	}
	return nil
}

// undoIfChanged checks, once the file is moved (and sealed), that no program wrote to it meanwhile;
// if one did, it removes what Adopt made and puts the file back at its path: a link first, so that
// a file since created at the path is not replaced. What it cannot undo, it says.
func undoIfChanged(file, dir, first string, created bool, locked os.FileInfo, f *os.File, made []string) error {
	changed := unchanged(file, locked, f)
	if changed == nil {
		return nil
	}
	for _, p := range made {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w; %s was moved to %s, and removing %s failed: %v", changed, file, first, p, err)
		}
	}
	if err := os.Link(first, file); err != nil {
		return fmt.Errorf("%w; %s was moved to %s, and moving it back failed: %v", changed, file, first, err)
	}
	if err := os.Remove(first); err != nil {
		return fmt.Errorf("%w; %s was moved to %s, and is at its path again too: %v", changed, file, first, err)
	}
	if created {
		os.Remove(dir)
	}
	if err := syncDir(filepath.Dir(file)); err != nil {
		return fmt.Errorf("%w (%v)", changed, err)
	}
	return changed
}
