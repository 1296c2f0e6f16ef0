// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/textmachine/outbox/inbox/db"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/journal"
)

// ApplyJournal applies the segmented journal in dir (journal.Open's directory) to the end it had
// when the call began, then returns. Its source name is "journal:" followed by the directory's
// absolute path. It reads the segments in the order of their names, each named by the journal-wide
// position of its first byte, from the position stored for the directory (a JournalPosition), in
// batches bounded in lines and bytes, and commits each batch's effects with the position after it
// (ApplyFrom), exactly once as ApplyFile does: a crash costs at most the batch in flight, read again.
//
// The stored position is proven in the segment it names before it is trusted (see JournalPosition):
// a directory that does not hold what it was taken in is ErrJournalReplaced, and nothing is read.
// While it has a segment open, it holds a shared flock on it, which the journal's retention
// respects: a segment is never removed under a reader that is reading it.
//
// It registers the position it committed with the journal (journal.SetReader) under the inbox's
// reader name: WithReaderName's, or one derived from the database's absolute path ("inbox-", the
// file's name, '-', 12 hex digits of the path's SHA-256), the same across restarts and different for
// two databases. It writes the registration once at the start (the position it reads from), after a
// commit at most every 250 ms or 16 MiB, and when the call ends (FollowJournal: also once it has had
// nothing to read for the rest of those 250 ms), always after the commit it names, so that it can
// lag the database (retention then keeps more), never run ahead of it (see the package doc); one
// that fails stops the call with the batches committed.
//
// A stored position below the journal's first retained segment, and a reader with no position of a
// journal whose first segment does not begin at byte 0, is a *JournalGapError wrapping
// ErrRetentionGap, naming what is gone: never a skip, never a silent start at the oldest or newest
// segment. AcceptRetentionGap is the operator's way past it.
//
// A reader with no position of a journal whose first segment began as a single-file journal the
// inbox read with ApplyFile or FollowFile (carried over by journal.Adopt, which keeps the file's
// bytes and inode as the first segment) goes on from the file source's position once: the file
// position whose device and inode are the first segment's (or, for a copy, whose first line is),
// and whose anchors and prefix digest the segment proves, is stored as the journal source's first
// position, and the file source is left as it is.
//
// After a Release or AcceptGap (a rewound source), it reads again from the first segment that can
// hold the next line of a run the inbox needs (journal.RunLocator, from the seal indexes), never
// further back, and at most from the last segment for a run the indexes do not describe.
//
// On an error, the batches before it are committed with their position. A path that is not a
// directory is journal.ErrNotJournal; a directory that does not exist or holds no segment is an
// error wrapping fs.ErrNotExist.
func (in *Inbox) ApplyJournal(ctx context.Context, dir string, h Handler) (Report, error) {
	s, err := in.newJournalSource("ApplyJournal", dir, h)
	if err != nil {
		return Report{}, err
	}
	defer s.close()
	if err := s.start(); err != nil {
		return Report{}, err
	}
	if err := s.load(ctx); err != nil {
		return s.rep, err
	}
	err = s.drain(ctx)
	if rerr := s.registerPending(ctx); err == nil {
		err = rerr
	}
	return s.rep, err
}

// FollowJournal applies the journal in dir as ApplyJournal does, then goes on applying what is
// appended to it, segment after segment by name, until ctx ends, and returns ctx.Err() with
// everything it applied committed. It waits for a directory that does not exist yet (or holds no
// segment). It wakes on file notifications in the directory (a line appended, a segment started)
// and at the poll interval whatever happens, so a lost notification costs latency, not lines; each
// wake-up also reads the stored position, so that a Release's rewind is taken up at once. A
// segment it is reading stays open, with its shared flock, until it is read to its end and the
// next one is open: a segment removed meanwhile is read to its end all the same. Any other error
// ends it as it ends ApplyJournal.
func (in *Inbox) FollowJournal(ctx context.Context, dir string, h Handler) error {
	s, err := in.newJournalSource("FollowJournal", dir, h)
	if err != nil {
		return err
	}
	defer s.close()
	k := newDirWaker(s.dir, in.pollInterval(), in.logger())
	defer k.close()
	err = s.load(ctx)
	for err == nil {
		if err = s.drain(ctx); err != nil {
			break
		}
		if err = s.idle(ctx, k); err != nil {
			break
		}
		err = s.look(ctx)
	}
	if rerr := s.registerPending(ctx); err == nil {
		err = rerr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// ForgetJournal gives up the position stored for the journal source of dir (and the position a
// rewound one was rewound from): the next ApplyJournal or FollowJournal reads the directory as a
// reader with no position does, from its first segment, or stops with ErrRetentionGap when that
// does not begin at byte 0. It is the operator's way past ErrJournalReplaced. Nothing else changes.
func (in *Inbox) ForgetJournal(ctx context.Context, dir string) error {
	s, err := in.newJournalSource("ForgetJournal", dir, func(context.Context, *sql.Tx, Event) error { return nil })
	if err != nil {
		return err
	}
	for {
		pos, from, err := in.SourceState(ctx, s.name)
		if err != nil || (pos == nil && from == nil) {
			return err
		}
		_, err = in.ApplyFrom(ctx, s.name, pos, nil, nil, s.h)
		if !errors.Is(err, ErrSourceMoved) {
			return err
		}
	}
}

// AcceptRetentionGap is the operator's explicit way past a journal's retention gap (a
// *JournalGapError): for the journal source of dir, whose stored position is below the journal's
// first retained segment, or which has none while the first segment does not begin at byte 0, it
// records the decision with AcceptGap's record (AcceptedGaps: RunID is the source's name,
// "journal:" and the directory; FirstSeq and LastSeq the journal-wide bytes given up; the reason,
// who, WithOperator or the operating system's user, and when) and stores the first retained
// segment's start as the source's position, in one transaction. The lines that went with the gap
// are not skipped silently for all that: each run's next line is checked on its own (run, seq), and
// a run that lost lines is quarantined for a gap until the operator releases it or accepts it
// (AcceptGap). A source with no gap is left as it is, with an error saying so.
func (in *Inbox) AcceptRetentionGap(ctx context.Context, dir, reason string) error {
	if err := checkReason(reason); err != nil {
		return err
	}
	s, err := in.newJournalSource("AcceptRetentionGap", dir, func(context.Context, *sql.Tx, Event) error { return nil })
	if err != nil {
		return err
	}
	bases, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	first := bases[0]
	var gapFrom int64
	err = in.write(ctx, func(t *txn) error {
		r, err := in.q.SourceGet(t.ctx, t.tx, s.name)
		var stored []byte
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			pos, from := sourceState(r.Position, r.Rewound)
			if pos == nil {
				pos = from
			}
			stored = position(r.Position)
			if pos != nil {
				jp, err := ParseJournalPosition(pos)
				if err != nil {
					return err
				}
				gapFrom = jp.Position
			}
			if pos == nil {
				gapFrom = 0
			}
		}
		if gapFrom >= first {
			return fmt.Errorf("inbox: journal %s: no retention gap to accept: the position (byte %d) is not below the first retained segment (byte %d)",
				quotePath(s.dir), gapFrom, first)
		}
		if err := t.checkSource(&move{s.name, stored, nil}); err != nil {
			return err
		}
		if err := in.q.GapAcceptedInsert(t.ctx, t.tx, db.GapAcceptedInsertParams{
			EngineRunID: s.name, FirstSeq: gapFrom, LastSeq: first - 1, Reason: reason,
			AcceptedBy: in.cfg.operator, AcceptedAt: t.now,
		}); err != nil {
			return err
		}
		start := JournalPosition{Position: first, Segment: first,
			In: FilePosition{Path: filepath.Join(s.dir, segmentFileName(first))}}
		return in.q.SourceSet(t.ctx, t.on(stmtSourceSet), db.SourceSetParams{Name: s.name, Position: start.encode(), UpdatedAt: t.now})
	})
	if err != nil {
		return wrapf(err, "accept the retention gap of journal %s", quotePath(s.dir))
	}
	in.cfg.logger.Warn("inbox: journal retention gap accepted", "dir", s.dir, "first_byte", gapFrom, "last_byte", first-1,
		"reason", reason, "by", in.cfg.operator)
	return nil
}

// journalSource is one call of ApplyJournal or FollowJournal.
type journalSource struct {
	in     *Inbox
	dir    string // absolute and clean
	name   string // JournalSourcePrefix + dir
	reader string // the name registered with the journal
	h      Handler
	follow bool
	bounds batchBounds

	stored []byte       // the position the inbox holds, exactly as stored (nil: none)
	cur    *journalFile // the segment being read, with a shared flock; nil: waiting for the journal
	base   int64        // cur's name
	pos    FilePosition // where reading stands in cur
	stopAt int64        // ApplyJournal: the journal's end when the call began
	rep    Report

	registered   int64     // the position last registered with the journal (-1: none this call)
	registeredAt time.Time // when
	pending      int64     // the position committed last; registered once it is registered's
}

// A journal source registers the position it committed with the journal (two fsyncs and a rename
// a time) at most once per registerEvery or per registerBytes read, and whenever it stops reading:
// at the end of an ApplyJournal or FollowJournal, and when a FollowJournal has had nothing to read
// for the rest of registerEvery. A registration that lags only makes retention keep more.
const registerBytes = 16 << 20

// outsideJournal refuses a journal directory that holds the inbox's own database (and so its -wal
// and -shm files, which lie beside it): a journal directory holds only the journal's files, and the
// engine's next journal.Open would refuse the whole journal for the database's, after this inbox had
// applied lines from it. Symbolic links are resolved where the paths exist, so that another name
// for the same directory is caught too.
func (in *Inbox) outsideJournal(call, dir string) error {
	db, err := filepath.Abs(in.path)
	if err != nil {
		return fmt.Errorf("inbox: %s: %w", call, err)
	}
	within := func(dbDir, dir string) bool {
		rel, err := filepath.Rel(dir, dbDir)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	dbDir := filepath.Dir(db)
	inside := within(dbDir, dir)
	if r, err := filepath.EvalSymlinks(dbDir); err == nil {
		if rd, err := filepath.EvalSymlinks(dir); err == nil {
			inside = inside || within(r, rd)
		}
	}
	if inside {
		return fmt.Errorf("inbox: %s: the inbox's database %s lies inside the journal directory %s, which must hold only the journal's files (the engine's journal.Open refuses the journal then): keep the database outside it; nothing was applied",
			call, quotePath(db), quotePath(dir))
	}
	return nil
}

// registerEvery is a variable so that a test can make every registration a call's start or end.
var registerEvery = 250 * time.Millisecond

func (in *Inbox) newJournalSource(call, dir string, h Handler) (*journalSource, error) {
	if h == nil {
		return nil, fmt.Errorf("inbox: %s with a nil handler", call)
	}
	if dir == "" {
		return nil, fmt.Errorf("inbox: %s with an empty directory", call)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: %s: %w", call, err)
	}
	if err := checkName(call+" directory", abs, MaxSourceNameLen-len(JournalSourcePrefix)); err != nil {
		return nil, err
	}
	if call == "ApplyJournal" || call == "FollowJournal" {
		if err := in.outsideJournal(call, abs); err != nil {
			return nil, err
		}
	}
	return &journalSource{in: in, dir: abs, name: JournalSourcePrefix + abs, reader: in.readerName(), h: h,
		follow: call == "FollowJournal", stopAt: -1, registered: -1, pending: -1,
		bounds: batchBounds{lines: in.batchLines(), bytes: in.batchBytes(), maxLine: in.maxLineSize()}}, nil
}

func (s *journalSource) close() {
	s.cur.close()
	s.cur = nil
}

// start takes ApplyJournal's end: the end of the last segment when the call began.
func (s *journalSource) start() error {
	bases, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	last := bases[len(bases)-1]
	st, err := os.Stat(filepath.Join(s.dir, segmentFileName(last)))
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	s.stopAt = last + st.Size()
	return nil
}

// segmentFileName is the name of the segment that begins at base.
func segmentFileName(base int64) string { return fmt.Sprintf("%020d.jsonl", base) }

// listSegments lists the names (positions) of dir's segments, in order, passing over every other
// file (indexes, reader files). A path that is not a directory is journal.ErrNotJournal; no
// directory, or one with no segment, an error wrapping fs.ErrNotExist.
func listSegments(dir string) ([]int64, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory (a single-file journal is read with ApplyFile)", journal.ErrNotJournal, quotePath(dir))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	var bases []int64
	for _, e := range ents {
		if base, ok := parseSegmentName(e.Name()); ok {
			if !e.Type().IsRegular() {
				return nil, fmt.Errorf("%w: %s: %s is not a regular file", journal.ErrNotJournal, quotePath(dir), e.Name())
			}
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("inbox: journal %s holds no segment: %w", quotePath(dir), fs.ErrNotExist)
	}
	slices.Sort(bases)
	return bases, nil
}

func parseSegmentName(name string) (int64, bool) {
	if len(name) != 20+len(".jsonl") || name[20:] != ".jsonl" {
		return 0, false
	}
	var v int64
	for _, c := range []byte(name[:20]) {
		if c < '0' || c > '9' || v > (1<<63-1-int64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// openSegment opens the segment at base for reading with a shared flock. A segment that is gone,
// or that retention holds to remove it, is an error wrapping fs.ErrNotExist.
func (s *journalSource) openSegment(base int64) (*journalFile, error) {
	path := filepath.Join(s.dir, segmentFileName(base))
	jf, err := openJournalFile(path)
	if err != nil {
		return nil, err
	}
	if err := lockShared(jf.f); err != nil {
		jf.close()
		if errors.Is(err, errHeldExclusive) {
			return nil, fmt.Errorf("inbox: segment %s is being removed: %w: %w", quotePath(path), errHeldExclusive, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("inbox: lock %s: %w", quotePath(path), err)
	}
	jf.shared = true
	// Removed between the open and the lock: retention took and gave up its lock meanwhile.
	if st, err := os.Stat(path); err != nil || !jf.sameID(st) {
		jf.close()
		return nil, fmt.Errorf("inbox: segment %s was removed: %w", quotePath(path), fs.ErrNotExist)
	}
	return jf, nil
}

// errHeldExclusive: another holds an exclusive flock on the segment (retention removing it).
var errHeldExclusive = errors.New("inbox: the segment is locked for removal")

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
		err = s.fresh(ctx, bases)
	}
	if err != nil {
		s.close()
		return err
	}
	return s.register(s.base + s.pos.Offset)
}

// register records the position with the journal's reader registry.
func (s *journalSource) register(pos int64) error {
	if s.in.lock == nil {
		return nil // a read-only inbox (OpenReadOnly) writes nothing, and commits nothing to register
	}
	if err := journal.SetReader(s.dir, s.reader, pos); err != nil {
		return fmt.Errorf("inbox: journal %s: register reader %s at byte %d: %w", quotePath(s.dir), s.reader, pos, err)
	}
	s.registered, s.pending, s.registeredAt = pos, pos, time.Now()
	if afterJournalRegister != nil {
		afterJournalRegister(s.dir, pos)
	}
	return nil
}

// afterJournalRegister, when set, is called after each registration a journal source writes: tests
// compare what was registered with what was committed.
var afterJournalRegister func(dir string, pos int64)

// registerSoon registers the position just committed when the last registration is registerEvery
// old or registerBytes behind it; otherwise it leaves it pending.
func (s *journalSource) registerSoon() error {
	if s.pending-s.registered < registerBytes && time.Since(s.registeredAt) < registerEvery {
		return nil
	}
	return s.register(s.pending)
}

// idle is FollowJournal's wait once it has read all there is. A position committed since the last
// registration is registered when nothing more comes for the rest of registerEvery after that
// registration (at once when it is older): a trickle of lines, each read as it comes, does not pay a
// registration per line, and a follower that stays idle has its position registered.
func (s *journalSource) idle(ctx context.Context, k *waker) error {
	if s.pending > s.registered {
		if rest := registerEvery - time.Since(s.registeredAt); rest > 0 {
			wctx, cancel := context.WithTimeout(ctx, rest)
			err := k.wait(wctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				return ctx.Err() // woken: read on, and come back here when nothing is left
			}
		}
		if err := s.registerPending(ctx); err != nil {
			return err
		}
	}
	return k.wait(ctx)
}

// registerPending registers a position committed since the last registration, unless the stored
// position is no longer the one this call committed: a Release rewound it meanwhile and lowered the
// registration, and a later write of the committed position would run ahead of the database.
func (s *journalSource) registerPending(ctx context.Context) error {
	if s.pending <= s.registered || s.in.lock == nil {
		return nil
	}
	// The call may end because its ctx did: what it committed is registered all the same.
	pos, err := s.in.SourcePosition(context.WithoutCancel(ctx), s.name)
	if err != nil {
		return err
	}
	if string(pos) != string(s.stored) {
		return nil // the next load registers where the source reads from
	}
	return s.register(s.pending)
}

// resume goes on from jp, proven in its segment: the segment's first line, the line that ends at
// the position and, with prove, every byte of the segment before it.
func (s *journalSource) resume(ctx context.Context, jp JournalPosition, bases []int64, prove bool) error {
	if jp.Position < bases[0] {
		return s.gap(ctx, jp.Position, bases[0])
	}
	i, found := slices.BinarySearch(bases, jp.Segment)
	if !found {
		if bases[0] == jp.Position {
			// The segment the position was proven in was read to its end and removed by retention;
			// the next one is the journal's first.
			return s.at(bases[0])
		}
		return s.replaced(jp, "the segment it was taken in is gone while earlier ones remain")
	}
	jf, err := s.openSegment(jp.Segment)
	if errors.Is(err, fs.ErrNotExist) {
		if bases, lerr := listSegments(s.dir); lerr == nil && bases[0] == jp.Position {
			return s.at(bases[0])
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

// at reads on from the start of the segment at base.
func (s *journalSource) at(base int64) error {
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
		return s.gap(ctx, jp.Position, bases[0])
	}
	loc, err := journal.NewRunLocator(ctx, s.dir)
	if err != nil {
		return err
	}
	target := min(jp.Position, loc.Last())
	if target > bases[0] {
		hwm, parked, err := s.marks(ctx)
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
	return s.at(target)
}

// marks reads every run's high-water mark, and which runs are quarantined (their lines are not
// applied, so none needs reading again).
func (s *journalSource) marks(ctx context.Context) (hwm map[string]int64, parked map[string]bool, err error) {
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

// fresh places a reader with no position: on from a file source the journal's first segment was
// adopted from, or at the first segment when it begins at byte 0; anything else is a gap.
func (s *journalSource) fresh(ctx context.Context, bases []int64) error {
	if bases[0] != 0 {
		return s.gap(ctx, -1, bases[0])
	}
	if err := s.at(0); err != nil {
		return err
	}
	fp, ok, err := s.adopted(ctx)
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

// adopted finds the file source whose file became the first segment (cur): its device and inode,
// or, for a copy, its first line, and a position the segment proves. The furthest one wins.
func (s *journalSource) adopted(ctx context.Context) (FilePosition, bool, error) {
	sources, err := s.in.Sources(ctx)
	if err != nil {
		return FilePosition{}, false, err
	}
	var best FilePosition
	found := false
	for _, src := range sources {
		if len(src.Name) <= len(FileSourcePrefix) || src.Name[:len(FileSourcePrefix)] != FileSourcePrefix || src.Position == nil {
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

// gap is the retention gap of a reader at pos (-1: none) of a journal whose first segment is first,
// naming the runs it will not get: those retention recorded deleting lines of past the inbox's
// high-water mark (journal.Retained), and those the retained seal indexes hold from a seq past the
// one the inbox needs next.
func (s *journalSource) gap(ctx context.Context, pos, first int64) error {
	e := &JournalGapError{Dir: s.dir, Position: pos, First: first}
	hwm, _, err := s.marks(ctx)
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
			if err := s.commit(ctx, next, lines); err != nil {
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
		return false, s.gap(ctx, at, bases[0])
	}
	return false, fmt.Errorf("%w: journal %s holds no segment at byte %d, where segment %s ends, but holds later ones",
		journal.ErrModified, quotePath(s.dir), at, segmentFileName(s.base))
}

// commit applies lines and stores the position after them, in one transaction, then registers it
// with the journal. When the stored position moved (a Release rewound it), it reads it again.
func (s *journalSource) commit(ctx context.Context, to FilePosition, lines [][]byte) error {
	jp := JournalPosition{Position: s.base + to.Offset, Segment: s.base, In: to}
	enc := jp.encode()
	rep, err := s.in.ApplyFrom(ctx, s.name, s.stored, enc, lines, s.h)
	if errors.Is(err, ErrSourceMoved) {
		return s.load(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		var le *LineError
		if errors.As(err, &le) && le.Index >= 0 && le.Index < len(lines) {
			// The lines before the malformed one are applied, so that the position stops exactly at it.
			if le.Index > 0 {
				before, perr := s.cur.advance(s.pos, lines[:le.Index])
				if perr != nil {
					return perr
				}
				if perr := s.commit(ctx, before, lines[:le.Index]); perr != nil {
					return perr
				}
				if s.pos != before {
					return nil // the position moved meanwhile and was read again: read on from it
				}
			}
			return wrapf(le, "journal %s, the line at byte %d", quotePath(s.dir), s.base+s.pos.Offset)
		}
		return wrapf(err, "journal %s, the batch of %d lines from byte %d", quotePath(s.dir), len(lines), s.base+s.pos.Offset)
	}
	s.rep.Applied += rep.Applied
	s.rep.Duplicates += rep.Duplicates
	s.rep.Stale += rep.Stale
	s.rep.Quarantined += rep.Quarantined
	s.stored = enc
	s.pos = to
	s.pending = jp.Position
	if err := s.registerSoon(); err != nil {
		return err
	}
	faultpoint.Hit(faultpoint.InboxBetweenBatches)
	return nil
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

// lowerJournalReaders is what a Release or AcceptGap of runID does, before its transaction and
// again after it, for the journals this inbox reads: the position each registered with the journal
// is lowered to the first segment that can hold the run's next line, so that retention cannot
// remove those segments between the rewind and the next read (the second time, in case a follower
// committed a batch and registered past it meanwhile). Only a reader file of this inbox's name that
// exists is lowered (a name no reader uses would hold retention back for ever). Lowering first is
// safe whatever follows: a registration behind the database only keeps more. A failure is logged,
// and the next read registers its position again.
func (in *Inbox) lowerJournalReaders(ctx context.Context, runID string) {
	if in.lock == nil {
		return // a read-only inbox (OpenReadOnly) changes nothing, and its Release fails
	}
	sources, err := in.Sources(ctx)
	if err != nil {
		in.logger().Warn("inbox: the journal readers were not lowered before a rewind", "run", runID, "err", err)
		return
	}
	var hwm int64 = -1
	name := in.readerName()
	for _, src := range sources {
		dir, ok := strings.CutPrefix(src.Name, JournalSourcePrefix)
		pos := src.Position
		if pos == nil {
			pos = src.RewoundFrom
		}
		if !ok || pos == nil {
			continue
		}
		jp, err := ParseJournalPosition(pos)
		if err != nil {
			continue
		}
		if hwm < 0 {
			if hwm, err = in.Position(ctx, runID); err != nil {
				in.logger().Warn("inbox: the journal readers were not lowered before a rewind", "run", runID, "err", err)
				return
			}
		}
		err = func() error {
			rs, err := journal.Readers(dir)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(rs, func(r journal.ReaderInfo) bool { return r.Name == name })
			if i < 0 {
				return nil
			}
			at, err := journal.LocateRun(ctx, dir, runID, hwm+1)
			if err != nil {
				return err
			}
			if at = min(at, jp.Position); at < rs[i].Position {
				return journal.SetReader(dir, name, at)
			}
			return nil
		}()
		if err != nil {
			in.logger().Warn("inbox: a journal reader was not lowered before a rewind", "dir", dir, "reader", name, "run", runID, "err", err)
		}
	}
}
