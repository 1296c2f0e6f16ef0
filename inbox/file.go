// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/journal"
)

// ApplyFile applies the journal file at path to the end it had when the call began, then returns.
// It reads on from the position stored for the path (its source name is "file:" followed by the
// absolute path), in batches bounded in lines and bytes, and commits each batch's effects with the
// position after it (ApplyFrom), so that memory stays bounded whatever the journal's length and a
// crash costs at most the batch in flight, which is read again.
//
// The stored position is checked against the file before it is trusted (its device and inode, a
// fingerprint of its first line, the line that ends at the offset, and, once per call, the SHA-256
// of everything before the offset; see FilePosition). A file that no longer holds what was read of
// it (truncated, cut by a copytruncate, rewritten past its old size or in place) is read again from
// its start, after a copy of it (journal.jsonl.1) when there is one; a path that now names another
// file (a rotation) has the file it named read to its end first, found by its device and inode in
// the directory where the path's file really is (a symbolic link followed) or the path's own, then
// any file rotated after it and before the path's (a journal rotated more than once meanwhile: the
// journal files named as a rotation names it, journal.jsonl.1, and last written no earlier than it,
// oldest first), then the new one from its start; a path that names another copy of the same
// journal (one that begins with the same line) is read from its start. The proof of the prefix costs one SHA-256 pass over
// the bytes before the position per call (about 1.4 GB/s on this project's 2-core machines, the file
// in the page cache: 0.7 s for a 1 GiB journal); while reading, the digest is carried on from batch
// to batch, one more pass over each line as it is read. After a Release or AcceptGap (a rewound
// source), the file the position named is read again from its start, to its end, then on as above.
// Reading again is safe:
// lines already applied are Duplicates. Lines are split as journal.Verify splits them, a '\r' before
// the newline kept in the line, and a last line without its newline is not taken.
//
// On an error, the batches before it are committed with their position and the Report says what
// they applied; the line where it stopped and those after it are not applied. A file that is not a
// journal, or is named as a segment of a journal directory (%020d.jsonl, read with ApplyJournal), is
// journal.ErrNotJournal and nothing is applied; a path that names no file (and has no
// stored position) is an error wrapping fs.ErrNotExist; a file the stored position was taken in that
// can no longer be found is ErrFileLost (see ForgetFile).
func (in *Inbox) ApplyFile(ctx context.Context, path string, h Handler) (Report, error) {
	s, err := in.newFileSource("ApplyFile", path, h)
	if err != nil {
		return Report{}, err
	}
	defer s.close()
	if err := s.load(ctx); err != nil {
		return s.rep, err
	}
	err = s.drain(ctx)
	return s.rep, err
}

// FollowFile applies the journal file at path as ApplyFile does, then goes on applying what is
// appended to it until ctx ends, and returns ctx.Err() with everything it applied committed. It
// waits for a file that does not exist yet. It wakes on file notifications (the directory is
// watched, so that creation and rotation are seen) and at the poll interval whatever happens, so a
// lost notification, or a queue of them that overflowed, costs latency, not lines. A rotation (the
// path now names another file) is followed: the old file, held open, is read to its end, then the
// new one from its start. Each wake-up also reads the stored position, so that after a Release,
// which rewinds the sources, the file its position named (held open, even if removed since) is read
// again from its start and to its end, then the path's file, though no new line has come.
// Any other error ends it as it ends ApplyFile.
func (in *Inbox) FollowFile(ctx context.Context, path string, h Handler) error {
	s, err := in.newFileSource("FollowFile", path, h)
	if err != nil {
		return err
	}
	defer s.close()
	k := newWaker(s.path, in.pollInterval(), in.logger())
	defer k.close()
	err = followSource(ctx, s, k.wait)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// ForgetFile gives up the position stored for the file source of path, so that the next ApplyFile
// or FollowFile reads the file the path names from its start. It is the operator's way past
// ErrFileLost when the lost file cannot be put back: the lines that were only in it are then
// missing, and the next line of each of their runs is a gap (the run is quarantined), not skipped.
// It gives up the position a rewound source was rewound from too. Nothing else changes; a path
// with no stored position is left as it is.
func (in *Inbox) ForgetFile(ctx context.Context, path string) error {
	s, err := in.newFileSource("ForgetFile", path, func(context.Context, *sql.Tx, Event) error { return nil })
	if err != nil {
		return err
	}
	return s.forget(ctx)
}

// fileSource is one call of ApplyFile or FollowFile.
type fileSource struct {
	sourceCall
	path string // absolute and clean

	l    located // where reading goes on; no cur: waiting for the file
	ends map[fileKey]int64
	done map[fileID2]bool // the files this call has read (or is reading): never a file rotated between two others
	why  string           // what the last look found had happened, logged once
}

func (in *Inbox) newFileSource(call, path string, h Handler) (*fileSource, error) {
	abs, err := sourcePath(call, "path", path, fileSourcePrefix, h)
	if err != nil {
		return nil, err
	}
	// A segment is sealed once the journal rolls to the next: read as a file, it would stop growing
	// there and the lines after it would never come, with nothing said.
	if _, ok := parseSegmentName(filepath.Base(abs)); ok {
		return nil, fmt.Errorf("inbox: %s: %w: %s is named as a segment of the journal directory %s, which is read as a whole (ApplyJournal, FollowJournal)",
			call, journal.ErrNotJournal, abs, filepath.Dir(abs))
	}
	return &fileSource{sourceCall: in.newSourceCall(fileSourcePrefix+abs, h, call == "FollowFile"), path: abs,
		ends: map[fileKey]int64{}, done: map[fileID2]bool{}}, nil
}

func (s *fileSource) close() { s.l.close() }

// load reads the stored position and finds where to read on from it. A rewound source (Release,
// AcceptGap) has none, but the one it was rewound from still says which file it was reading: that
// file is read again from its start and to its end, then on through the rotation, as the position
// would have been read on.
func (s *fileSource) load(ctx context.Context) error {
	pos, from, err := s.in.SourceState(ctx, s.name)
	if err != nil {
		return err
	}
	s.stored = pos
	var p *FilePosition
	if from != nil {
		pos = from
	}
	if pos != nil {
		fp, err := ParseFilePosition(pos)
		if err != nil {
			return fmt.Errorf("%w (the position stored for %s)", err, quotePath(s.path))
		}
		p = &fp
	}
	return s.relocate(p, from != nil)
}

// relocate finds where to read on from p, reusing the file being read when it is the one needed;
// with whole, from the start of the file p names (see locate).
func (s *fileSource) relocate(p *FilePosition, whole bool) error {
	if p != nil {
		c := *p // p may point into s.l, which is cleared
		p = &c
	}
	open := s.l.cur
	if s.l.next != nil && s.l.next != open {
		s.l.next.close()
	}
	s.l = located{}
	l, err := locate(s.path, p, open, whole, s.done)
	if err != nil {
		if p == nil && s.follow && errors.Is(err, fs.ErrNotExist) {
			return nil // FollowFile waits for the file
		}
		return err
	}
	if l.why != "" && l.why != s.why {
		s.in.logger().Info("inbox: "+l.why, "path", s.path, "reading", l.cur.name, "from", l.pos.Offset)
	}
	s.why = l.why
	s.l = l
	s.reading(l.cur)
	// Each file's end is taken when the call first sees it: the path's file too, though it is read
	// only after a rotated one.
	for _, jf := range []*journalFile{l.cur, l.next} {
		if jf != nil {
			if _, err := s.end(jf); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileKey tells files apart, by their name too where the system gives no inode.
type fileKey struct {
	name     string
	dev, ino uint64
}

// end is where reading stops in jf: for ApplyFile, the file's end when the call first saw it; for
// FollowFile, its end now.
func (s *fileSource) end(jf *journalFile) (int64, error) {
	size, err := jf.size()
	if err != nil || s.follow {
		return size, err
	}
	key := fileKey{jf.name, jf.dev, jf.ino}
	if e, ok := s.ends[key]; ok {
		return min(e, size), nil
	}
	s.ends[key] = size
	return size, nil
}

// drain applies batch after batch until no complete line is left to read, going on to the path's
// file once a rotated one is read to its end.
func (s *fileSource) drain(ctx context.Context) error {
	for s.l.cur != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Checked before every batch, not only at each wake-up: a journal cut and written again past
		// the position between two batches would otherwise be read from the middle of a line.
		ok, err := s.l.cur.holds(s.l.pos)
		if err != nil {
			return err
		}
		if !ok {
			if err := s.relocate(&s.l.pos, false); err != nil {
				return err
			}
			continue
		}
		end, err := s.end(s.l.cur)
		if err != nil {
			return err
		}
		lines, next, err := s.l.cur.readBatch(s.l.pos, end, s.bounds)
		if errors.Is(err, errCutUnder) {
			if err := s.relocate(&s.l.pos, false); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if len(lines) > 0 {
			if err := commitBatch(ctx, s, next, lines); err != nil {
				return err
			}
			continue
		}
		if s.l.pos.Offset < end {
			faultpoint.Hit(faultpoint.InboxTornTail)
		}
		if s.l.next == nil {
			return nil
		}
		// The rotated file is read to its end: go on to the path's file, and say so in the database
		// at once, so that the old file is not needed again even if it is deleted now.
		nf, between := s.l.next, s.l.between
		s.l.cur.close()
		s.l = located{cur: nf, pos: nf.start()}
		s.reading(nf)
		if err := commitBatch(ctx, s, s.l.pos, nil); err != nil {
			return err
		}
		if between {
			// A file rotated between two others: the one after it is looked for again.
			if err := s.relocate(&s.l.pos, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// reading notes jf as a file this call reads.
func (s *fileSource) reading(jf *journalFile) {
	if jf != nil && (jf.dev != 0 || jf.ino != 0) {
		s.done[fileID2{jf.dev, jf.ino}] = true
	}
}

func (s *fileSource) call() *sourceCall { return &s.sourceCall }

func (s *fileSource) cursor() (*journalFile, FilePosition) { return s.l.cur, s.l.pos }

func (s *fileSource) encode(to FilePosition) []byte { return to.encode() }

func (s *fileSource) where() (string, int64) { return quotePath(s.l.cur.name), s.l.pos.Offset }

func (s *fileSource) committed(to FilePosition) error {
	s.l.pos = to
	if afterFileCommit != nil {
		afterFileCommit(s.name, to)
	}
	return nil
}

// afterFileCommit, when set, is called after each batch a file source commits: benchmarks time the
// way from the writer's append to the commit with it.
var afterFileCommit func(source string, to FilePosition)

// look is FollowFile's check after each wake-up: the stored position is still the one this call
// stored (a Release may have rewound it), the path still names the file being read, and that file
// still holds what was read of it. Anything else is a new look for where to read on.
func (s *fileSource) look(ctx context.Context) error {
	pos, err := s.in.SourcePosition(ctx, s.name)
	if err != nil {
		return err
	}
	if string(pos) != string(s.stored) || s.l.cur == nil {
		return s.load(ctx)
	}
	if s.l.next != nil {
		return nil // already going on to the path's file
	}
	st, err := os.Stat(s.path)
	if err == nil && s.l.cur.sameID(st) {
		ok, err := s.l.cur.holds(s.l.pos)
		if err != nil || ok {
			return err
		}
	}
	p := s.l.pos
	return s.relocate(&p, false)
}
