// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/journal"
)

// end is where reading stops in cur: its size, and for ApplyJournal no further than the journal's
// end when the call began.
func (s *journalSource) end() (int64, error) {
	size, err := s.cur.size()
	if err != nil || s.follow {
		return size, err
	}
	return max(min(size, s.stopAt-s.base), 0), nil
}

// drain applies batch after batch, segment after segment by name, until no complete line is left to
// read (for ApplyJournal: up to the journal's end when the call began).
func (s *journalSource) drain(ctx context.Context) error {
	for s.cur != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Checked before every batch: a segment rewritten under the position is never read from the
		// middle of a line.
		ok, err := s.cur.holds(s.pos)
		if err != nil {
			return err
		}
		if !ok {
			return s.replaced(JournalPosition{Position: s.base + s.pos.Offset, Segment: s.base, In: s.pos},
				"its segment no longer holds the lines read")
		}
		end, err := s.end()
		if err != nil {
			return err
		}
		lines, next, err := s.cur.readBatch(s.pos, end, s.bounds)
		if errors.Is(err, errCutUnder) {
			return s.replaced(JournalPosition{Position: s.base + s.pos.Offset, Segment: s.base, In: s.pos},
				"its segment was cut while being read")
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
		if s.pos.Offset < end {
			faultpoint.Hit(faultpoint.InboxTornTail)
		}
		if !s.follow && s.base+end >= s.stopAt {
			return nil // the journal's end when the call began: a line being written then is the next call's
		}
		moved, err := s.next(ctx, end)
		if err != nil || !moved {
			return err
		}
	}
	return nil
}

// next goes on to the segment after cur once cur holds no complete line after the position within
// end, the end the last read had: the one named by the position after cur's last byte. It reports
// false when there is none yet (cur is the last segment), and true without moving when cur has
// grown past end meanwhile (read on in it).
func (s *journalSource) next(ctx context.Context, end int64) (bool, error) {
	if s.pos.Offset == 0 {
		return false, nil // an empty segment: nothing comes after it before a line in it
	}
	at := s.base + s.pos.Offset
	jf, err := s.openSegment(at)
	if err == nil {
		// Once the next segment exists, cur is sealed: a line after the position in it would be a
		// torn or foreign tail, never read.
		if size, err := s.cur.size(); err != nil || size != s.pos.Offset {
			jf.close()
			if err != nil {
				return false, err
			}
			return false, fmt.Errorf("%w: journal %s: sealed segment %s ends with %d bytes that are not a complete line",
				journal.ErrModified, quotePath(s.dir), segmentFileName(s.base), size-s.pos.Offset)
		}
		s.cur.close()
		s.cur, s.base, s.pos = jf, at, jf.start()
		return true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	bases, err := listSegments(s.dir)
	if err != nil {
		return false, err
	}
	if bases[len(bases)-1] <= s.base {
		return false, nil // cur is the last segment: wait for lines or a roll
	}
	if _, ok := slices.BinarySearch(bases, at); ok {
		return true, nil // started since the open was tried: look again
	}
	// A later segment exists, so cur is sealed: its size now is its final one.
	size, err := s.cur.size()
	switch {
	case err != nil:
		return false, err
	case size > end:
		return true, nil
	case size > s.pos.Offset:
		return false, fmt.Errorf("%w: journal %s: sealed segment %s ends with %d bytes that are not a complete line",
			journal.ErrModified, quotePath(s.dir), segmentFileName(s.base), size-s.pos.Offset)
	case bases[0] > at:
		return false, s.gapError(ctx, at, bases[0])
	}
	return false, fmt.Errorf("%w: journal %s holds no segment at byte %d, where segment %s ends, but holds later ones",
		journal.ErrModified, quotePath(s.dir), at, segmentFileName(s.base))
}

func (s *journalSource) call() *sourceCall { return &s.sourceCall }

func (s *journalSource) cursor() (*journalFile, FilePosition) { return s.cur, s.pos }

func (s *journalSource) encode(to FilePosition) []byte {
	return JournalPosition{Position: s.base + to.Offset, Segment: s.base, In: to}.encode()
}

func (s *journalSource) where() (string, int64) {
	return "journal " + quotePath(s.dir), s.base + s.pos.Offset
}

// committed also registers the position with the journal, when one is due.
func (s *journalSource) committed(to FilePosition) error {
	s.pos = to
	s.pending = s.base + to.Offset
	return s.registerSoon()
}

// look is FollowJournal's check after each wake-up: the stored position is still the one this call
// stored (a Release may have rewound it), and the journal is there.
func (s *journalSource) look(ctx context.Context) error {
	pos, err := s.in.SourcePosition(ctx, s.name)
	if err != nil {
		return err
	}
	if string(pos) != string(s.stored) || s.cur == nil {
		return s.load(ctx)
	}
	return nil
}

// newDirWaker is a waker for a journal directory: any notification in it wakes the follower (a
// line appended to a segment, a segment started), and its parent is watched too, so that a
// directory created later is seen.
func newDirWaker(dir string, poll time.Duration, log *slog.Logger) *waker {
	return newWakerFor(dir, true, poll, log)
}
