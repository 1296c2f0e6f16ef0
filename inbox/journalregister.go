// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/textmachine/outbox/journal"
)

// A journal source registers the position it committed with the journal (two fsyncs and a rename
// a time) at most once per registerEvery or per registerBytes read, and whenever it stops reading:
// at the end of an ApplyJournal or FollowJournal, and when a FollowJournal has had nothing to read
// for the rest of registerEvery. A registration that lags only makes retention keep more.
const registerBytes = 16 << 20

// registerEvery is a variable so that a test can make every registration a call's start or end.
var registerEvery = 250 * time.Millisecond

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
		dir, ok := strings.CutPrefix(src.Name, journalSourcePrefix)
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
