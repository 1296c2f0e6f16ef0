// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// Trim deletes the sealed segments that retention lets go (see the package's Retention section):
// oldest first, each only when every registered reader's position is at or past its end and it is
// older than WithKeep, or the journal is over WithMaxBytes; it stops at the first segment that must
// stay, and never deletes the last segment or one a reader holds open. A reader file that cannot be
// read holds every segment but what the cap deletes, and is returned as the error, naming the file,
// with the report of what the cap deleted. A done ctx stops it before the next group of segments;
// the report says what it deleted until then. A Journal given WithKeep or WithMaxBytes trims after
// each seal by itself.
func (j *Journal) Trim(ctx context.Context) (TrimReport, error) {
	if err := ctx.Err(); err != nil {
		return TrimReport{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return TrimReport{}, err
	}
	return j.trim(ctx)
}

// trim runs a trim with j.mu held.
func (j *Journal) trim(ctx context.Context) (rep TrimReport, err error) {
	readers, bad, badErr := readReaders(j.dir)
	if badErr != nil && len(bad) == 0 {
		return TrimReport{}, badErr // the directory itself
	}
	end := j.tailBase + j.size
	steps, held, _, err := j.ret.plan(j.dir, j.sealed, end, j.size, j.segSize, readers, bad, j.st)
	if err != nil {
		return TrimReport{}, err
	}
	// A reader file that cannot be read holds every segment but what the cap takes, and is the
	// trim's error once the cap has been kept.
	defer func() {
		if err == nil {
			err = badErr
		}
	}()
	// The segments locked for deletion, let go on every way out.
	var locked []*os.File
	release := func() {
		for _, f := range locked {
			unlock(f)
		}
		locked = nil
	}
	defer release()
	defer func() {
		rep.Held, rep.Segments, rep.Bytes, rep.First = held, len(j.sealed)+1, end-firstBase(j.sealed, j.tailBase), firstBase(j.sealed, j.tailBase)
		rep.OverCap = j.ret.maxBytes > 0 && rep.Bytes > j.ret.maxBytes
	}()
	for len(steps) > 0 {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		group := steps[:min(trimGroup, len(steps))]
		for k, s := range group {
			f, err := os.Open(filepath.Join(j.dir, segmentName(s.seg.base)))
			if err != nil {
				release()
				return rep, fmt.Errorf("journal: trim: %w", err)
			}
			if err := lock(f); err != nil {
				f.Close()
				if !errors.Is(err, errHeld) {
					release()
					return rep, fmt.Errorf("journal: trim: lock %s: %w", f.Name(), err)
				}
				held = &Held{Position: s.seg.base, Size: s.seg.size, Reason: HeldOpen}
				group, steps = group[:k], group[:k]
				break
			}
			locked = append(locked, f)
		}
		if len(group) == 0 {
			break
		}
		faultpoint.Hit(faultTrimLocked)
		ns := j.st.clone()
		for _, s := range group {
			if s.reason == ReasonRecorded {
				continue // its runs and its bytes are in the record already
			}
			si, err := j.segmentIndex(ctx, s.seg)
			if err != nil {
				release()
				return rep, err
			}
			ns.noteDeleted(si)
			ns.segments++
			ns.bytes += s.seg.size
			if s.reason == ReasonCap {
				ns.capped++
			}
		}
		last := group[len(group)-1].seg
		ns.deleted = max(ns.deleted, last.base+last.size)
		if err := ns.write(j.dir); err != nil {
			release()
			return rep, err
		}
		j.st = ns
		faultpoint.Hit(faultTrimRecorded)
		if j.rd != nil {
			j.rd.Close()
			j.rd, j.rdIdx = nil, -1
		}
		for k, s := range group {
			if err := os.Remove(filepath.Join(j.dir, segmentName(s.seg.base))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				// What is recorded and not unlinked is deleted by the next trim.
				j.dropSealed(k)
				release()
				return rep, fmt.Errorf("journal: trim: %w", err)
			}
			faultpoint.Hit(faultTrimSegment)
			if err := os.Remove(filepath.Join(j.dir, indexName(s.seg.base))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				j.dropSealed(k + 1)
				release()
				return rep, fmt.Errorf("journal: trim: %w", err)
			}
			faultpoint.Hit(faultTrimIndex)
			rep.note(s)
			j.noteTrimmed(s)
		}
		release()
		j.dropSealed(len(group))
		if err := syncDir(j.dir); err != nil {
			return rep, err
		}
		steps = steps[len(group):]
	}
	return rep, nil
}

func (rep *TrimReport) note(s planStep) {
	rep.Deleted = append(rep.Deleted, DeletedSegment{Position: s.seg.base, Size: s.seg.size, Reason: s.reason, Behind: s.behind})
	rep.DeletedBytes += s.seg.size
	if s.reason == ReasonCap {
		rep.UnderCap++
		for _, name := range s.behind {
			if !slices.Contains(rep.LeftBehind, name) {
				rep.LeftBehind = append(rep.LeftBehind, name)
			}
		}
	}
}

func (j *Journal) noteTrimmed(s planStep) {
	if s.reason == ReasonCap && len(s.behind) > 0 {
		j.ret.log.Error("journal: retention deleted a segment readers had not read, to keep the journal under its cap",
			"dir", j.dir, "segment", segmentName(s.seg.base), "bytes", s.seg.size, "max_bytes", j.ret.maxBytes, "readers", s.behind)
		return
	}
	if s.reason == ReasonCap {
		j.ret.log.Warn("journal: retention deleted a segment younger than the keep duration, to keep the journal under its cap",
			"dir", j.dir, "segment", segmentName(s.seg.base), "bytes", s.seg.size, "max_bytes", j.ret.maxBytes)
		return
	}
	j.ret.log.Info("journal: retention deleted a segment", "dir", j.dir, "segment", segmentName(s.seg.base),
		"bytes", s.seg.size, "reason", s.reason)
}

// dropSealed forgets the first n sealed segments, and the run index built over them: the next
// lookup rebuilds it from the remaining indexes (and what retention recorded it deleted).
func (j *Journal) dropSealed(n int) {
	if n == 0 {
		return
	}
	j.sealed = slices.Delete(j.sealed, 0, n)
	j.runs.init(0)
	j.loaded, j.merged = 0, false
	if j.rd != nil {
		j.rd.Close()
	}
	j.rd, j.rdIdx = nil, -1
}

// trimAfterSeal runs a trim after a roll when retention is on; its failure is logged, not
// returned: the batch that sealed is written.
func (j *Journal) trimAfterSeal(ctx context.Context) {
	if !j.ret.retain {
		return
	}
	// The batch is written whatever its caller's context says now; the trim is short, and Close
	// still interrupts it.
	rep, err := j.trim(context.WithoutCancel(ctx))
	if err != nil {
		j.ret.log.Error("journal: retention after a seal failed; the next seal or Trim tries again", "dir", j.dir, "err", err)
		return
	}
	if rep.OverCap {
		j.ret.log.Warn("journal: the journal is over its cap after a trim", "dir", j.dir, "bytes", rep.Bytes,
			"max_bytes", j.ret.maxBytes, "held", rep.Held)
	}
}

// Trim trims the journal in dir as Journal.Trim does, when no Journal has it open: it takes the
// directory's lock (ErrLocked when a Journal has it; that Journal trims by itself when it was given
// WithKeep or WithMaxBytes, and on its Trim). opts are Open's (WithKeep, WithMaxBytes, WithLogger).
// A directory without segments has nothing to trim; a path that is not a directory, or a directory
// holding a file no journal keeps, is ErrNotJournal, as at Open.
func Trim(ctx context.Context, dir string, opts ...Option) (TrimReport, error) {
	if err := ctx.Err(); err != nil {
		return TrimReport{}, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return TrimReport{}, err
	}
	if len(segs) == 0 {
		if err := checkJournalNames(dir); err != nil {
			return TrimReport{}, err
		}
		// Nothing to delete; a reader file that cannot be read is still worth saying.
		_, err := Readers(dir)
		return TrimReport{}, err
	}
	j, err := Open(dir, opts...)
	if err != nil {
		return TrimReport{}, err
	}
	rep, err := j.Trim(ctx)
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	return rep, err
}
