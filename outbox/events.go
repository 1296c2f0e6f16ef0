// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/textmachine/outbox/db"
)

// EventLine is one stored journal line: its sequence number and its exact bytes, without a newline.
type EventLine struct {
	Seq  int64
	Line []byte
}

// EventBuilder renders the line for the sequence number the store has just assigned. It runs inside
// the write transaction, so its failure rolls the number back with everything else. Returning a nil
// line declines: nothing is stored and no number is used. It must not call the store's write methods:
// the store's one writer connection is busy with the transaction it runs in (with group commit, on the
// committer goroutine, between the other calls of its group), and such a call fails at once with
// ErrCallInsideTx. RunBuilder makes one that is given the enqueue's run id as well.
type EventBuilder func(seq int64) ([]byte, error)

// EnqueueEvent assigns runID's next sequence number, has build render the line, and stores it, in one
// transaction. It returns the number, or 0 when build declined. An error from build is returned
// (wrapped) and nothing is stored.
func (s *Store) EnqueueEvent(ctx context.Context, runID string, build EventBuilder) (seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return 0, err
	}
	return s.enqueueCall(ctx, runID, "", build)
}

// EnqueueOnce is EnqueueEvent for an event that must reach the journal once for the life of the book,
// whatever crashes and restarts happen: the announcement that a unit is done, which a reader counts.
//
// When onceKey is already in the ledger, or pending on a line not yet projected, it returns
// (false, 0, nil) without calling build: one row per key for the life of the book. Otherwise it
// enqueues and returns (true, seq, nil); a declining build gives (false, 0, nil). The key is stored
// with the line and enters the ledger when the relay (or MarkAnnounced) records that the line reached
// the journal; Relay.Recover does that for lines an earlier process left pending.
func (s *Store) EnqueueOnce(ctx context.Context, runID, onceKey string, build EventBuilder) (announcing bool, seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return false, 0, err
	}
	if err := checkOnceKey(onceKey); err != nil {
		return false, 0, err
	}
	seq, err = s.enqueueCall(ctx, runID, onceKey, build)
	return seq > 0, seq, err
}

// enqueueCall runs one enqueue: through the group committer, or in a transaction of its own.
func (s *Store) enqueueCall(ctx context.Context, runID, onceKey string, build EventBuilder) (int64, error) {
	if s.cfg.groupCommit && !s.readOnly {
		return s.submit(ctx, runID, onceKey, build)
	}
	var seq int64
	err := s.write(ctx, durable, func(w *txWriter) (err error) {
		seq, _, err = s.enqueue(w.ctx, w, runID, onceKey, build)
		return raise(err)
	})
	return committedSeq(seq, err)
}

// EnqueueEvents enqueues a batch of runID's events in one transaction, all or nothing: each builder
// gets the next number in order; a declining builder takes none, and its entry in seqs is 0. An error
// from any builder (or a line it renders that is invalid) stores none of them.
func (s *Store) EnqueueEvents(ctx context.Context, runID string, builds []EventBuilder) (seqs []int64, err error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	for i, b := range builds {
		if b == nil {
			return nil, fmt.Errorf("outbox: EnqueueEvents: builder %d is nil", i)
		}
	}
	seqs = make([]int64, len(builds))
	if len(builds) == 0 {
		return seqs, nil
	}
	err = s.write(ctx, durable, func(w *txWriter) error {
		for i, build := range builds {
			seq, _, err := s.enqueue(w.ctx, w, runID, "", build)
			if err != nil {
				return raise(err)
			}
			seqs[i] = seq
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return nil, err
	}
	return seqs, err
}

// committedSeq is what an enqueue returns: the seq with a nil error, or with ErrNotDurable, whose
// commit was made; 0 with any other error, which means nothing was stored.
func committedSeq(seq int64, err error) (int64, error) {
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return 0, err
	}
	return seq, err
}

// EnqueueTx is EnqueueEvent inside a transaction the caller holds, usually the one WriteTx passes to
// its function: the event then commits or rolls back with the caller's own writes. The caller commits.
// If the caller rolls back, the number is not used. On the transaction WriteTx passes, it fails
// without writing when SQLite has already rolled that transaction back (a statement of the caller's
// was interrupted by its context): its insert would otherwise commit on its own. On a transaction of
// the caller's own *sql.DB the store cannot ask SQLite that: a caller whose statement in it failed
// must not go on to EnqueueTx, or the event is stored on its own while the transaction is not.
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, runID string, build EventBuilder) (seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return 0, err
	}
	return s.enqueueTx(ctx, tx, runID, "", build)
}

// EnqueueOnceTx is EnqueueOnce inside a transaction the caller holds, usually the one WriteTx passes
// to its function: the announcement commits or rolls back with the state change it announces. It
// returns (false, 0, nil) without calling build when onceKey is in the ledger or pending, and is
// otherwise EnqueueTx, with the same rules for the caller's transaction. The key is held from the
// commit on; a rolled-back transaction leaves it free.
func (s *Store) EnqueueOnceTx(ctx context.Context, tx *sql.Tx, runID, onceKey string, build EventBuilder) (announcing bool, seq int64, err error) {
	if err := checkEnqueue(runID, build); err != nil {
		return false, 0, err
	}
	if err := checkOnceKey(onceKey); err != nil {
		return false, 0, err
	}
	seq, err = s.enqueueTx(ctx, tx, runID, onceKey, build)
	return seq > 0, seq, err
}

// enqueueTx is the body of EnqueueTx and EnqueueOnceTx.
func (s *Store) enqueueTx(ctx context.Context, tx *sql.Tx, runID, onceKey string, build EventBuilder) (seq int64, err error) {
	if tx == nil {
		return 0, errors.New("outbox: EnqueueTx with a nil transaction")
	}
	if err := s.enter(true); err != nil {
		return 0, err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	defer func() { err = s.named(err) }()
	w := s.newTxWriter(ctx, tx, nil, &lineCounts{})
	own := s.current.Load()
	if own != nil && own.tx == tx {
		if err := s.txLost(); err != nil {
			return 0, err
		}
		// The store's own transaction, on the writer connection: its lines are added to the
		// figures with the transaction's others, when write commits it.
		w.st, w.counts = s.stmts, own.counts
	}
	seq, _, err = s.enqueue(ctx, w, runID, onceKey, build)
	if w.st == nil {
		// A transaction of the caller's, which the caller commits: the line is added now, in it.
		// A call that stored nothing has nothing to add.
		if cerr := w.addCounts(context.WithoutCancel(ctx)); cerr != nil {
			if _, ok := err.(userPanic); !ok {
				seq, err = 0, errors.Join(err, cerr)
			}
		}
	}
	if up, ok := err.(userPanic); ok {
		// The caller's own value: no recovery of the store's stands between here and the caller
		// on a foreign transaction, and inside WriteTx its function's recovery marks it again.
		panic(up.val)
	}
	return seq, err
}

func checkEnqueue(runID string, build EventBuilder) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	if build == nil {
		return errors.New("outbox: nil EventBuilder")
	}
	return nil
}

// enqueue is the one body of every enqueue, on a transaction or in a group: a once key already taken
// ends it, then the next number, the line rendered and checked, the insert. It returns the seq and the
// line's length, or seq 0 when the key was taken or build declined. ctx is the caller's: a call whose
// context has ended stores nothing. A panic of build's comes back as a userPanic error, for the
// caller's goroutine to raise.
func (s *Store) enqueue(ctx context.Context, w *txWriter, runID, onceKey string, build EventBuilder) (seq int64, size int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if onceKey != "" {
		if found, err := w.onceKeyFound(onceKey); err != nil || found {
			return 0, 0, err
		}
	}
	seq, err = w.nextSeq(runID)
	if err != nil {
		return 0, 0, err
	}
	line, err := s.render(ctx, w.group, EnqueueCall{RunID: runID, Seq: seq, OnceKey: onceKey}, build)
	if err != nil || line == nil {
		return 0, 0, err
	}
	if err := w.insert(db.EventInsertParams{
		EngineRunID: runID, Seq: seq, Line: line, AnnounceKey: onceKey, EnqueuedAt: time.Now().UnixMilli(),
	}); err != nil {
		return 0, 0, err
	}
	s.markLive(runID)
	return seq, len(line), nil
}
