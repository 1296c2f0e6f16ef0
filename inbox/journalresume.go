// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"github.com/textmachine/outbox/journal"
)

// load reads the stored position and finds where to read on from it. A segment it needs that
// retention is removing at that moment (it holds the segment's exclusive lock between writing its
// record and unlinking the file) is looked for again once it is gone, for a few seconds at most.
func (s *journalSource) load(ctx context.Context) error {
	for range 200 {
		err := s.loadOnce(ctx)
		if !errors.Is(err, errHeldExclusive) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return s.loadOnce(ctx)
}

func (s *journalSource) loadOnce(ctx context.Context) error {
	s.close()
	pos, from, err := s.in.SourceState(ctx, s.name)
	if err != nil {
		return err
	}
	s.stored = pos
	bases, err := listSegments(s.dir)
	if err != nil {
		if s.follow && pos == nil && from == nil && errors.Is(err, fs.ErrNotExist) {
			return nil // FollowJournal waits for the journal
		}
		return err
	}
	switch {
	case pos != nil:
		jp, perr := ParseJournalPosition(pos)
		if perr != nil {
			return fmt.Errorf("%w (the position stored for journal %s)", perr, quotePath(s.dir))
		}
		err = s.resume(ctx, jp, bases, true)
	case from != nil:
		jp, perr := ParseJournalPosition(from)
		if perr != nil {
			return fmt.Errorf("%w (the position journal %s was rewound from)", perr, quotePath(s.dir))
		}
		err = s.rewind(ctx, jp, bases)
	default:
		err = s.placeWithoutPosition(ctx, bases)
	}
	if err != nil {
		s.close()
		return err
	}
	return s.register(s.base + s.pos.Offset)
}

// resume goes on from jp, proven in its segment: the segment's first line, the line that ends at
// the position and, with prove, every byte of the segment before it.
func (s *journalSource) resume(ctx context.Context, jp JournalPosition, bases []int64, prove bool) error {
	if jp.Position < bases[0] {
		return s.gapError(ctx, jp.Position, bases[0])
	}
	i, found := slices.BinarySearch(bases, jp.Segment)
	if !found {
		if bases[0] == jp.Position {
			// The segment the position was proven in was read to its end and removed by retention;
			// the next one is the journal's first.
			return s.moveToSegment(bases[0])
		}
		return s.replaced(jp, "the segment it was taken in is gone while earlier ones remain")
	}
	jf, err := s.openSegment(jp.Segment)
	if errors.Is(err, fs.ErrNotExist) {
		if bases, lerr := listSegments(s.dir); lerr == nil && bases[0] == jp.Position {
			return s.moveToSegment(bases[0])
		}
	}
	if err != nil {
		return err
	}
	if i+1 < len(bases) {
		if size, err := jf.size(); err != nil || size != bases[i+1]-jp.Segment {
			jf.close()
			if err != nil {
				return err
			}
			return s.replaced(jp, fmt.Sprintf("sealed segment %d is %d bytes, and the next segment's name says %d", jp.Segment, size, bases[i+1]-jp.Segment))
		}
	}
	ok, err := jf.holds(jp.In)
	if ok && err == nil && prove {
		ok, err = jf.provesPrefix(jp.In)
	}
	if err != nil || !ok {
		jf.close()
		if err != nil && !errors.Is(err, errCutUnder) {
			return err
		}
		return s.replaced(jp, "its segment does not hold the lines the position was taken after")
	}
	s.cur, s.base, s.pos = jf, jp.Segment, jp.In
	s.pos.Path = jf.name
	return nil
}

// moveToSegment reads on from the start of the segment at base.
func (s *journalSource) moveToSegment(base int64) error {
	jf, err := s.openSegment(base)
	if err != nil {
		return err
	}
	s.cur, s.base, s.pos = jf, base, jf.start()
	return nil
}

func (s *journalSource) replaced(jp JournalPosition, why string) error {
	return fmt.Errorf("%w: journal %s, %s: %s (ForgetJournal gives the position up)", ErrJournalReplaced, quotePath(s.dir), jp, why)
}

// rewind finds where a source rewound from jp reads again: the first segment that can hold the
// next line of a run the inbox needs, from the seal indexes, and at most the last segment.
func (s *journalSource) rewind(ctx context.Context, jp JournalPosition, bases []int64) error {
	if jp.Position < bases[0] {
		return s.gapError(ctx, jp.Position, bases[0])
	}
	loc, err := journal.NewRunLocator(ctx, s.dir)
	if err != nil {
		return err
	}
	target := min(jp.Position, loc.Last())
	if target > bases[0] {
		hwm, parked, err := s.highWaterMarks(ctx)
		if err != nil {
			return err
		}
		for _, run := range loc.Runs() {
			if !parked[run] {
				target = min(target, loc.Locate(run, hwm[run]+1))
			}
		}
	}
	target = max(target, bases[0])
	if target == jp.Position {
		return s.resume(ctx, jp, bases, false)
	}
	s.in.logger().Info("inbox: journal source rewound", "dir", s.dir, "from", jp.Position, "reading", target)
	return s.moveToSegment(target)
}

// highWaterMarks reads every run's high-water mark, and which runs are quarantined (their lines are not
// applied, so none needs reading again).
func (s *journalSource) highWaterMarks(ctx context.Context) (hwm map[string]int64, parked map[string]bool, err error) {
	hwm = make(map[string]int64)
	for r, err := range s.in.AllRuns(ctx) {
		if err != nil {
			return nil, nil, err
		}
		hwm[r.RunID] = r.Position
	}
	qs, err := s.in.Quarantined(ctx)
	if err != nil {
		return nil, nil, err
	}
	parked = make(map[string]bool, len(qs))
	for _, q := range qs {
		parked[q.RunID] = true
	}
	return hwm, parked, nil
}

// placeWithoutPosition places a reader with no position: on from a file source the journal's first segment was
// adopted from, or at the first segment when it begins at byte 0; anything else is a gap.
func (s *journalSource) placeWithoutPosition(ctx context.Context, bases []int64) error {
	if bases[0] != 0 {
		return s.gapError(ctx, -1, bases[0])
	}
	if err := s.moveToSegment(0); err != nil {
		return err
	}
	fp, ok, err := s.adoptedFileSource(ctx)
	if err != nil || !ok {
		return err
	}
	jp := JournalPosition{Position: fp.Offset, Segment: 0, In: fp}
	enc := jp.encode()
	if _, err := s.in.ApplyFrom(ctx, s.name, nil, enc, nil, s.h); err != nil {
		if errors.Is(err, ErrSourceMoved) {
			return s.load(ctx)
		}
		return err
	}
	s.in.logger().Info("inbox: journal source goes on from the file source its first segment was adopted from",
		"dir", s.dir, "file", fp.Path, "offset", fp.Offset)
	s.stored, s.pos = enc, fp
	return nil
}

// adoptedFileSource finds the file source whose file became the first segment (cur): its device and inode,
// or, for a copy, its first line, and a position the segment proves. The furthest one wins.
func (s *journalSource) adoptedFileSource(ctx context.Context) (FilePosition, bool, error) {
	sources, err := s.in.Sources(ctx)
	if err != nil {
		return FilePosition{}, false, err
	}
	var best FilePosition
	found := false
	for _, src := range sources {
		if len(src.Name) <= len(fileSourcePrefix) || src.Name[:len(fileSourcePrefix)] != fileSourcePrefix || src.Position == nil {
			continue
		}
		fp, err := ParseFilePosition(src.Position)
		if err != nil || fp.Offset == 0 || (found && fp.Offset <= best.Offset) {
			continue
		}
		if !(fp.Device == s.cur.dev && fp.Inode == s.cur.ino) {
			if ok, err := s.cur.sameJournal(fp); err != nil || !ok {
				continue
			}
		}
		ok, err := s.cur.holds(fp)
		if err == nil && ok {
			ok, err = s.cur.provesPrefix(fp)
		}
		if err != nil {
			return FilePosition{}, false, err
		}
		if ok {
			best, found = fp, true
		}
	}
	best.Path, best.Device, best.Inode = s.cur.name, s.cur.dev, s.cur.ino
	return best, found, nil
}

// gapError is the retention gap of a reader at pos (-1: none) of a journal whose first segment is first,
// naming the runs it will not get: those retention recorded deleting lines of past the inbox's
// high-water mark (journal.Retained), and those the retained seal indexes hold from a seq past the
// one the inbox needs next.
func (s *journalSource) gapError(ctx context.Context, pos, first int64) error {
	e := &JournalGapError{Dir: s.dir, Position: pos, First: first}
	hwm, _, err := s.highWaterMarks(ctx)
	if err != nil {
		return e
	}
	last := map[string]int64{} // per run, the last seq lost
	if info, err := journal.Retained(s.dir); err == nil {
		for _, r := range info.Runs {
			if r.LastSeq > hwm[r.RunID] {
				last[r.RunID] = max(last[r.RunID], r.LastSeq)
			}
		}
	}
	if loc, err := journal.NewRunLocator(ctx, s.dir); err == nil {
		for _, run := range loc.Runs() {
			if f, ok := loc.FirstSeq(run); ok && f > hwm[run]+1 {
				last[run] = max(last[run], f-1)
			}
		}
	}
	for _, run := range slices.Sorted(maps.Keys(last)) {
		if len(e.RunsLost) < MaxRunsNamed {
			e.RunsLost = append(e.RunsLost, LostRun{RunID: run, FirstSeq: hwm[run] + 1, LastSeq: last[run]})
		} else {
			e.RunsLostMore++
		}
	}
	return e
}
