// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// The fault points of a retention delete, in the order it passes them.
const (
	faultTrimLocked   = "journal.trim_locked"   // the segments to delete are locked, nothing recorded
	faultTrimRecorded = "journal.trim_recorded" // the record says they are deleted; none is unlinked
	faultTrimSegment  = "journal.trim_segment"  // a segment is unlinked, its index not yet
	faultTrimIndex    = "journal.trim_index"    // a segment and its index are unlinked, the directory not synced
)

// trimGroup bounds how many segments one step of a trim locks, records and unlinks together: one
// record write for many segments, and a bounded number of descriptors held.
const trimGroup = 64

// Why a segment is deleted.
const (
	ReasonRead     = "every reader has read it" // and it is older than the keep duration
	ReasonCap      = "the journal is over its cap"
	ReasonRecorded = "retention recorded its deletion before a crash or an error stopped it"
)

// Why a segment stays.
const (
	HeldUnread  = "a reader has not read it"
	HeldKeep    = "it is younger than the keep duration"
	HeldOpen    = "a reader holds it open"
	HeldAhead   = "a reader's position is past the journal's end, so it says nothing about what the reader has read"
	HeldBadFile = "a reader's file cannot be read, so what that reader has read is unknown"
)

// WithKeep keeps a sealed segment at least d after it was sealed (its modification time), even once
// every reader has read it (0 by default). Giving WithKeep or WithMaxBytes turns retention on: the
// Journal trims after each seal. d must not be negative.
func WithKeep(d time.Duration) Option {
	return func(o *options) { o.keep, o.retain = d, true }
}

// WithMaxBytes caps the journal's size, the sum of its segments' sizes: past n, the oldest sealed
// segments are deleted even when a reader has not read them (logged at Error with the readers left
// behind, and counted: Stats, TrimReport). The last segment is never deleted, nor a segment a reader
// holds open, so the journal exceeds n while those alone exceed it. Giving WithKeep or WithMaxBytes
// turns retention on. n must be positive.
func WithMaxBytes(n int64) Option {
	return func(o *options) { o.maxBytes, o.maxSet, o.retain = n, true, true }
}

// WithLogger sets where the Journal says what retention deleted and why, and what failed in a trim
// run after a seal (which does not fail the Append that sealed). The Journal is silent by default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// withClock replaces the time retention measures segments' ages against, for tests.
func withClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// DeletedSegment is a segment a trim deleted, or would delete.
type DeletedSegment struct {
	Position, Size int64
	Reason         string   // one of the Reason constants
	Behind         []string // readers that had not read it (a deletion under the cap)
}

// Held is the first sealed segment a trim keeps, and why: every later segment stays with it.
type Held struct {
	Position, Size int64
	Reason         string    // one of the Held constants
	Readers        []string  // the readers that hold it (HeldUnread, HeldAhead)
	Until          time.Time // HeldKeep: when it may go
}

// TrimReport says what a trim deleted and what the journal is after it.
type TrimReport struct {
	Deleted      []DeletedSegment // oldest first
	DeletedBytes int64
	UnderCap     int      // of Deleted, how many went under the cap (a reader had not read them, or the keep duration held them)
	LeftBehind   []string // the readers whose unread lines the cap deleted
	Held         *Held    // nil when every sealed segment went
	First        int64    // the first retained byte: the first segment's position
	Bytes        int64    // the segments' bytes after the trim
	Segments     int
	OverCap      bool // the journal is still over WithMaxBytes (its last segment, or held segments, exceed it)
}

// Stats are a Journal's figures for metrics.
type Stats struct {
	Bytes    int64 // the segments' bytes
	Segments int
	First    int64 // the first retained byte
	End      int64 // the journal's end: the position of its next byte
	// Totals of what retention deleted from this directory, kept across starts.
	DeletedSegments, DeletedBytes, DeletedUnderCap int64
}

// Stats returns the journal's size and what retention deleted from it.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := Stats{Segments: len(j.sealed) + 1, Bytes: j.size, End: j.tailBase + j.size, First: j.tailBase,
		DeletedSegments: j.st.segments, DeletedBytes: j.st.bytes, DeletedUnderCap: j.st.capped}
	for _, seg := range j.sealed {
		s.Bytes += seg.size
	}
	if len(j.sealed) > 0 {
		s.First = j.sealed[0].base
	}
	return s
}

// retention is what a Journal needs to trim.
type retention struct {
	keep     time.Duration
	maxBytes int64 // 0: no cap
	retain   bool  // trim after each seal
	log      *slog.Logger
	now      func() time.Time
}

func newRetention(o *options) (retention, error) {
	if o.keep < 0 {
		return retention{}, fmt.Errorf("journal: keep %v: it must not be negative", o.keep)
	}
	if o.maxSet && o.maxBytes <= 0 {
		return retention{}, fmt.Errorf("journal: max bytes %d: it must be positive", o.maxBytes)
	}
	r := retention{keep: o.keep, maxBytes: o.maxBytes, retain: o.retain, log: o.logger, now: o.now}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r, nil
}

type planStep struct {
	seg    segment
	reason string
	behind []string
}

// plan decides, oldest first, which sealed segments go and stops at the first that must stay.
// readers are read before end was taken, so no reader's position is legitimately past end.
//
// The cap counts the last segment as full (the segment size, or the largest segment in the
// directory when that is smaller, as for a journal written with smaller segments than the options
// say): a trim runs at each seal, and the last segment grows until the next, so that the journal
// stays under the cap between seals too.
func (r *retention) plan(dir string, sealed []segment, end, tailSize, segSize int64, readers []ReaderInfo, bad []string, st *retState) ([]planStep, *Held, int64, error) {
	largest := tailSize
	for _, s := range sealed {
		largest = max(largest, s.size)
	}
	total := end - firstBase(sealed, end-tailSize) - tailSize + max(tailSize, min(segSize, largest))
	var steps []planStep
	now := r.now()
	for _, seg := range sealed {
		segEnd := seg.base + seg.size
		if segEnd <= st.deleted {
			steps = append(steps, planStep{seg: seg, reason: ReasonRecorded})
			total -= seg.size
			continue
		}
		var behind, ahead []string
		for _, rd := range readers {
			switch {
			case rd.Position > end:
				ahead = append(ahead, rd.Name)
			case rd.Position < segEnd:
				behind = append(behind, rd.Name)
			}
		}
		held := &Held{Position: seg.base, Size: seg.size}
		switch {
		case len(bad) > 0:
			held.Reason, held.Readers = HeldBadFile, bad
		case len(ahead) > 0:
			held.Reason, held.Readers = HeldAhead, ahead
		case len(behind) > 0:
			held.Reason, held.Readers = HeldUnread, behind
		case r.keep > 0:
			st, err := os.Stat(filepath.Join(dir, segmentName(seg.base)))
			if err != nil {
				return nil, nil, 0, fmt.Errorf("journal: %w", err)
			}
			if until := st.ModTime().Add(r.keep); now.Before(until) {
				held.Reason, held.Until = HeldKeep, until
			}
		}
		switch {
		case held.Reason == "":
			steps = append(steps, planStep{seg: seg, reason: ReasonRead})
		case r.maxBytes > 0 && total > r.maxBytes:
			steps = append(steps, planStep{seg: seg, reason: ReasonCap, behind: append(append(behind, ahead...), bad...)})
		default:
			return steps, held, total, nil
		}
		total -= seg.size
	}
	return steps, nil, total, nil
}

// firstBase is the position of the first segment: the first sealed one, or the last.
func firstBase(sealed []segment, tailBase int64) int64 {
	if len(sealed) > 0 {
		return sealed[0].base
	}
	return tailBase
}

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

// checkJournalNames refuses, as Open does, a directory holding a file no journal keeps: what reports
// on a journal must not report a mistyped path as a journal with no segments yet.
func checkJournalNames(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, e := range ents {
		if !isJournalName(e) {
			return fmt.Errorf("%w: %s holds %q, which is not a file of a journal", ErrNotJournal, dir, e.Name())
		}
	}
	return nil
}

// isJournalName says whether Open takes e as one of a journal's files (see Journal.open).
func isJournalName(e os.DirEntry) bool {
	name := e.Name()
	if _, ok := parseBase(name, segmentExt); ok {
		return true // Open says on its own what is wrong with one that is not a regular file
	}
	if !e.Type().IsRegular() {
		return false
	}
	for _, ext := range []string{indexExt, tmpExt} {
		if _, ok := parseBase(name, ext); ok {
			return true
		}
	}
	_, reader := parseReaderFileName(name)
	return reader || parseReaderTmpName(name) || name == stateName || name == stateTmpName ||
		name == summaryName || name == summaryTmpName
}

// listSegments reads dir's segments in order, without its lock, checking that each sealed one ends
// where the next begins.
func listSegments(dir string) ([]segment, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotJournal, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var segs []segment
	for _, e := range ents {
		if base, ok := parseBase(e.Name(), segmentExt); ok {
			segs = append(segs, segment{base: base})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int { return int(min(max(a.base-b.base, -1), 1)) })
	for i := range segs {
		st, err := os.Stat(filepath.Join(dir, segmentName(segs[i].base)))
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		segs[i].size = st.Size()
		if i > 0 && segs[i-1].base+segs[i-1].size != segs[i].base {
			return nil, fmt.Errorf("%w: %s: sealed segment %s is %d bytes, and the next segment's name says %d",
				ErrModified, dir, segmentName(segs[i-1].base), segs[i-1].size, segs[i].base-segs[i-1].base)
		}
	}
	return segs, nil
}

// RetainedInfo says where a journal's retained bytes begin and what retention deleted before them.
type RetainedInfo struct {
	// First is the journal-wide position of the first retained byte: the first segment's position.
	First int64
	// End is the position of the journal's next byte.
	End int64
	// Runs are the runs whose lines retention deleted, each with the last seq of it deleted, for
	// the runs of the most recently deleted segments (at most 1000); RunsDropped says how many
	// runs deleted earlier are no longer listed.
	Runs        []DeletedRun
	RunsDropped int64
	// Totals of what retention deleted, and of that, the segments deleted under the cap while a
	// reader had not read them.
	DeletedSegments, DeletedBytes, DeletedUnderCap int64
}

// Retained reports where the journal in dir begins and what retention deleted, without the
// directory's lock: what a reader whose position is below First reports as lost. A directory whose
// first or last segments were deleted by another program is ErrModified, as at Open: those lines
// are not retention's to report.
func Retained(dir string) (RetainedInfo, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return RetainedInfo{}, err
	}
	st, found, err := readState(dir)
	if err != nil {
		return RetainedInfo{}, err
	}
	if len(segs) > 0 {
		bases := make([]int64, len(segs))
		for i, s := range segs {
			bases[i] = s.base
		}
		// Lines deleted by hand are not retention's to report.
		if err := checkEnds(dir, bases, st, found); err != nil {
			return RetainedInfo{}, err
		}
	}
	info := RetainedInfo{First: st.deleted, End: st.deleted, Runs: st.runs, RunsDropped: st.dropped,
		DeletedSegments: st.segments, DeletedBytes: st.bytes, DeletedUnderCap: st.capped}
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		info.First, info.End = segs[0].base, last.base+last.size
	}
	return info, nil
}

// ReaderLag is a registered reader and how far behind the journal's end it is.
type ReaderLag struct {
	ReaderInfo
	LagBytes    int64
	LagSegments int  // the segments holding bytes it has not read
	Ahead       bool // its position is past the journal's end
	Lost        bool // its position is below the first retained byte: retention deleted lines it had not read
}

// DirStatus is what Status reports of a journal directory.
type DirStatus struct {
	Segments    int
	First, End  int64 // the first retained byte, and the position of the next
	Last        int64 // the last segment's position: the one appended to
	Bytes       int64
	Readers     []ReaderLag
	Retained    RetainedInfo
	WouldDelete []DeletedSegment // what a trim with the options given would delete now
	Held        *Held            // and the first segment it would keep, and why
	OverCap     bool             // over WithMaxBytes even after that trim
}

// Status reports the journal in dir, its readers and their lag, and what a trim with opts
// (WithKeep, WithMaxBytes) would delete and what it would keep and why, without the directory's
// lock and changing nothing. It cannot see which segments readers hold open. A path that is not a
// directory, or a directory holding a file no journal keeps, is ErrNotJournal, as at Open: a
// mistyped path is not reported as a journal with no segments yet.
func Status(ctx context.Context, dir string, opts ...Option) (DirStatus, error) {
	if err := ctx.Err(); err != nil {
		return DirStatus{}, err
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			return DirStatus{}, errors.New("journal: Status: a nil Option")
		}
		opt(&o)
	}
	ret, err := newRetention(&o)
	if err != nil {
		return DirStatus{}, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return DirStatus{}, err
	}
	if err := checkJournalNames(dir); err != nil {
		return DirStatus{}, err
	}
	readers, err := Readers(dir)
	if err != nil {
		return DirStatus{}, err
	}
	st, _, err := readState(dir)
	if err != nil {
		return DirStatus{}, err
	}
	info, err := Retained(dir)
	if err != nil {
		return DirStatus{}, err
	}
	ds := DirStatus{Segments: len(segs), First: info.First, End: info.End, Bytes: info.End - info.First, Retained: info}
	if len(segs) > 0 {
		ds.Last = segs[len(segs)-1].base
	}
	for _, r := range readers {
		lag := ReaderLag{ReaderInfo: r, Ahead: r.Position > ds.End, Lost: r.Position < ds.First}
		if !lag.Ahead {
			lag.LagBytes = ds.End - r.Position
			for _, s := range segs {
				if s.base+s.size > r.Position {
					lag.LagSegments++
				}
			}
		}
		ds.Readers = append(ds.Readers, lag)
	}
	if len(segs) > 1 {
		segSize := o.segmentSize
		if segSize <= 0 {
			segSize = DefaultSegmentSize
		}
		steps, held, _, err := ret.plan(dir, segs[:len(segs)-1], ds.End, segs[len(segs)-1].size, segSize, readers, nil, st)
		if err != nil {
			return DirStatus{}, err
		}
		after := ds.Bytes
		for _, s := range steps {
			ds.WouldDelete = append(ds.WouldDelete, DeletedSegment{Position: s.seg.base, Size: s.seg.size, Reason: s.reason, Behind: s.behind})
			after -= s.seg.size
		}
		ds.Held, ds.OverCap = held, ret.maxBytes > 0 && after > ret.maxBytes
	} else {
		ds.OverCap = ret.maxBytes > 0 && ds.Bytes > ret.maxBytes
	}
	return ds, nil
}
