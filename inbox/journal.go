// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/textmachine/outbox/inbox/internal/db"
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
// lag the database (retention then keeps more), never run ahead of it (see the package doc). The
// writes after a commit are made beside the reading, so that no line waits for their fsyncs, and
// the call returns only once the last is written; one that fails stops the call with the batches
// committed, at its next commit, wake-up or end.
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
	if err := s.takeStopAt(); err != nil {
		return Report{}, err
	}
	if err := s.load(ctx); err != nil {
		return s.rep, err
	}
	err = s.drain(ctx)
	// The call's own error wins; after a clean end, a failed registration is the error.
	if rerr := s.registerPending(ctx); err == nil {
		err = rerr
	}
	return s.rep, err
}

// FollowJournal applies the journal in dir as ApplyJournal does, then goes on applying what is
// appended to it, segment after segment by name, until ctx ends, and returns ctx.Err() with
// everything it applied committed; or, when its last registration with the journal fails, that
// error, which does not wrap ctx's (the reader file lags the database, and retention keeps what it
// no longer needs until the next call registers). It waits for a directory that does not exist yet
// (or holds no segment). It wakes on file notifications in the directory (a line appended, a
// segment started) and at the poll interval whatever happens, so a lost notification costs latency,
// not lines; each wake-up also reads the stored position, so that a Release's rewind is taken up at
// once. A segment it is reading stays open, with its shared flock, until it is read to its end and
// the next one is open: a segment removed meanwhile is read to its end all the same. Any other
// error ends it as it ends ApplyJournal.
func (in *Inbox) FollowJournal(ctx context.Context, dir string, h Handler) error {
	s, err := in.newJournalSource("FollowJournal", dir, h)
	if err != nil {
		return err
	}
	defer s.close()
	k := newDirWaker(s.dir, in.pollInterval(), in.logger())
	defer k.close()
	err = followSource(ctx, s, func(ctx context.Context) error { return s.idle(ctx, k) })
	rerr := s.registerPending(ctx)
	if ctx.Err() != nil {
		// Its context ending is a follower's clean end, so the registration's failure is the call's
		// error, and it does not wrap the context's: a caller that takes context.Canceled for its
		// own shutdown would drop it, and retention would go on keeping what was applied.
		if rerr != nil {
			return fmt.Errorf("%w (FollowJournal was stopping: %v)", rerr, ctx.Err())
		}
		return ctx.Err()
	}
	if err == nil {
		err = rerr
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
	return s.forget(ctx)
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
	sourceCall
	dir    string // absolute and clean
	reader string // the name registered with the journal

	cur    *journalFile // the segment being read, with a shared flock; nil: waiting for the journal
	base   int64        // cur's name
	pos    FilePosition // where reading stands in cur
	stopAt int64        // ApplyJournal: the journal's end when the call began

	registered   int64     // the position last handed to reg, or registered by a load (-1: none this call)
	registeredAt time.Time // when
	pending      int64     // the position committed last; registered once it is registered's
	reg          registrar // writes the registrations after a commit, beside the reading
}

func (in *Inbox) newJournalSource(call, dir string, h Handler) (*journalSource, error) {
	abs, err := sourcePath(call, "directory", dir, journalSourcePrefix, h)
	if err != nil {
		return nil, err
	}
	if call == "ApplyJournal" || call == "FollowJournal" {
		if err := in.outsideJournal(call, abs); err != nil {
			return nil, err
		}
	}
	return &journalSource{sourceCall: in.newSourceCall(journalSourcePrefix+abs, h, call == "FollowJournal"), dir: abs,
		reader: in.readerName(), stopAt: -1, registered: -1, pending: -1, reg: registrar{want: -1}}, nil
}

// close closes the segment being read, once no registration is being written: nothing is written
// after the call returns, even on a handler's panic.
func (s *journalSource) close() {
	s.settle()
	s.cur.close()
	s.cur = nil
}

// takeStopAt takes ApplyJournal's end: the end of the last segment when the call began.
func (s *journalSource) takeStopAt() error {
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
