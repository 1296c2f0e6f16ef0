// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/textmachine/outbox/journal"
)

// A journal source registers the position it committed with the journal (two fsyncs and a rename
// a time) at most once per registerEvery or per registerBytes read, and whenever it stops reading:
// at the end of an ApplyJournal or FollowJournal, and when a FollowJournal has had nothing to read
// for the rest of registerEvery. A registration that lags only makes retention keep more.
//
// Those writes are made beside the reading, by one writer per call (registrar), never by the
// loop that reads and applies lines: a line appended while the reader file is being synced is
// applied at once, not after the fsyncs. Only a load's registration (the call's start, a rewound
// position taken up) is written by the loop itself, and the call's end waits for the writer.
const registerBytes = 16 << 20

// registerEvery is a variable so that a test can make every registration a call's start or end.
var registerEvery = 250 * time.Millisecond

// registrar is a journal source's writer of registrations: it writes, one at a time, the newest
// committed position handed to it (a position handed while another is being written replaces any
// still waiting), each only once the database is found to hold it, so that the reader file never
// runs ahead of the database, however late the write comes.
type registrar struct {
	mu      sync.Mutex
	want    int64         // the newest position handed and not yet taken up (-1: none)
	writing chan struct{} // closed when the running writer stops (nil: none runs)
	err     error         // the first write that failed: the call stops with it
}

// hand gives the writer the committed position pos to register, starting it if none runs.
func (s *journalSource) hand(pos int64) {
	if s.in.lock == nil {
		return // a read-only inbox (OpenReadOnly) writes nothing, and commits nothing to register
	}
	s.registered, s.registeredAt = pos, time.Now()
	r := &s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = pos
	if r.writing == nil && r.err == nil {
		r.writing = make(chan struct{})
		go s.writeHanded(r.writing)
	}
}

// writeHanded writes what is handed until nothing more is, or a write fails.
func (s *journalSource) writeHanded(done chan struct{}) {
	r := &s.reg
	for {
		r.mu.Lock()
		pos := r.want
		r.want = -1
		if pos < 0 || r.err != nil {
			r.writing = nil
			r.mu.Unlock()
			close(done)
			return
		}
		r.mu.Unlock()
		if err := s.registerCommitted(pos); err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
		}
	}
}

// settle drops a position handed and not yet taken up, and waits for the write in progress: what
// a load does before it registers where it reads from (a Release may have rewound the position
// under the one handed), and what the call does when it closes, so that nothing is written after it
// returns.
func (s *journalSource) settle() {
	s.reg.mu.Lock()
	s.reg.want = -1
	s.reg.mu.Unlock()
	s.waitWriter()
}

// waitWriter waits until the writer has written all it was handed, or failed. Only the reading
// loop hands positions, and it is the one waiting: none is handed meanwhile.
func (s *journalSource) waitWriter() {
	s.reg.mu.Lock()
	w := s.reg.writing
	s.reg.mu.Unlock()
	if w != nil {
		<-w
	}
}

// failed is the writer's first failure, if one came.
func (s *journalSource) failed() error {
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	return s.reg.err
}

// registerCommitted is the writer's write of pos, once the database holds it: the stored position is
// at pos or past it. A stored position behind pos, or none, is a Release's rewind: pos is dropped,
// and the load that takes the rewind up registers where the source reads from. The check and the
// write are one step under the inbox's regMu, which a Release's lowering takes too, so that a
// rewind cannot fall between them.
func (s *journalSource) registerCommitted(pos int64) error {
	if holdJournalRegister != nil {
		holdJournalRegister(s.dir, pos)
	}
	s.in.regMu.Lock()
	defer s.in.regMu.Unlock()
	stored, err := s.in.SourcePosition(context.Background(), s.name)
	if err != nil || stored == nil {
		return err
	}
	jp, err := ParseJournalPosition(stored)
	if err != nil {
		return fmt.Errorf("%w (the position stored for journal %s)", err, quotePath(s.dir))
	}
	if jp.Position < pos {
		return nil
	}
	return s.setReader(pos)
}

// register records the position a load reads from with the journal's reader registry, on the
// reading loop, once nothing handed before is left to write; unless the stored position is no
// longer the one the load read (a Release rewound it meanwhile): the next look takes that up.
func (s *journalSource) register(pos int64) error {
	if s.in.lock == nil {
		return nil // a read-only inbox (OpenReadOnly) writes nothing, and commits nothing to register
	}
	s.settle()
	if err := s.failed(); err != nil {
		return err
	}
	if holdJournalRegister != nil {
		holdJournalRegister(s.dir, pos)
	}
	s.in.regMu.Lock()
	defer s.in.regMu.Unlock()
	stored, err := s.in.SourcePosition(context.Background(), s.name)
	if err != nil {
		return err
	}
	if string(stored) == string(s.stored) {
		if err := s.setReader(pos); err != nil {
			return err
		}
	}
	s.registered, s.pending, s.registeredAt = pos, pos, time.Now()
	return nil
}

// setReader writes the reader file; the caller holds regMu.
func (s *journalSource) setReader(pos int64) error {
	if err := journal.SetReader(s.dir, s.reader, pos); err != nil {
		return fmt.Errorf("inbox: journal %s: register reader %s at byte %d: %w", quotePath(s.dir), s.reader, pos, err)
	}
	if afterJournalRegister != nil {
		afterJournalRegister(s.dir, pos)
	}
	return nil
}

// afterJournalRegister, when set, is called after each registration a journal source writes: tests
// compare what was registered with what was committed.
var afterJournalRegister func(dir string, pos int64)

// holdJournalRegister, when set, is called before each registration a journal source writes: a test
// holds one there to see what goes on while it is in progress.
var holdJournalRegister func(dir string, pos int64)

// registerSoon hands the position just committed to the writer when the last hand-off is
// registerEvery old or registerBytes behind it; otherwise it leaves it pending. A write that failed
// since stops the call here.
func (s *journalSource) registerSoon() error {
	if err := s.failed(); err != nil {
		return err
	}
	if s.pending-s.registered < registerBytes && time.Since(s.registeredAt) < registerEvery {
		return nil
	}
	s.hand(s.pending)
	return nil
}

// idle is FollowJournal's wait once it has read all there is. A position committed since the last
// hand-off is handed when nothing more comes for the rest of registerEvery after that hand-off (at
// once when it is older): a trickle of lines, each read as it comes, does not pay a registration
// per line, and a follower that stays idle has its position registered. It waits for lines, not
// for the write: a line that comes meanwhile is read at once.
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
		s.hand(s.pending)
	}
	if err := s.failed(); err != nil {
		return err
	}
	return k.wait(ctx)
}

// registerPending is a call's end: it hands a position committed since the last hand-off and waits
// until the writer has written it (or dropped it: a Release rewound the stored position meanwhile,
// and a write of the committed position would run ahead of the database). It returns the first
// write that failed, this one or an earlier one not reported yet. Its ctx may have ended: what the
// call committed is registered all the same.
func (s *journalSource) registerPending(_ context.Context) error {
	if s.pending > s.registered {
		s.hand(s.pending)
	}
	s.waitWriter()
	return s.failed()
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
			// Under regMu: a follower's writer, which checks the stored position before it writes,
			// has either written before this looks, or sees the rewind.
			in.regMu.Lock()
			defer in.regMu.Unlock()
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
