// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrCallInsideTx is returned at once by a write of the store (RetireEvent and a relay's Flush, Run and
// Recover included, before they wait for a run's turn or append anything) called from inside a
// transaction of the same store: from WriteTx's function, or from an EventBuilder or a line check,
// which run inside the enqueue's transaction (with group commit, on the store's committer goroutine).
// That transaction holds the store's one writer connection, so the call would wait for itself until
// its deadline. Use EnqueueTx or EnqueueOnceTx with WriteTx's transaction instead; reads (ReadTx,
// PendingEvents, …) use the read pool and work there.
//
// The store knows the goroutine that runs the caller's code holding the writer, so a call made on
// that goroutine is caught, at the cost of an atomic load while no such code runs. A call that the
// function hands to another goroutine and then waits for cannot be told from any other
// caller's: it waits for the writer and fails when its own deadline or the operation timeout ends it
// (WithOpTimeout), with an error wrapping context.DeadlineExceeded.
var ErrCallInsideTx = errors.New("outbox: a call from inside a transaction of the same store (a WriteTx function, an EventBuilder or a line check called the store); the transaction holds the store's one writer, so the call would wait for itself: use EnqueueTx on that transaction instead")

// checkNotInsideTx fails a write begun on the goroutine that runs the caller's code holding the
// store's writer.
func (s *Store) checkNotInsideTx() error {
	if s.wr.Inside(nil) {
		return ErrCallInsideTx
	}
	return nil
}

// ReadTx runs fn in one read transaction on the read pool: every query of fn sees the same snapshot,
// the book as it was at fn's first read, whatever commits in the meantime. It never takes the writer,
// so it neither waits for writes nor delays them, and it works on a read-only store and inside
// WriteTx's function (where it does not see that transaction's uncommitted writes). The transaction
// is read-only (PRAGMA query_only): a write in it fails. fn's error is returned as it is; if fn
// panics, the transaction ends and the panic continues. The operation timeout (WithOpTimeout) bounds
// fn when ctx has no deadline.
func (s *Store) ReadTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	if fn == nil {
		return errors.New("outbox: ReadTx with a nil function")
	}
	if err := s.enter(false); err != nil {
		return err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	defer s.recoverDriver(&err)
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin a read: %w", mapErr(ctx, err))
	}
	defer tx.Rollback() // nothing to commit: the rollback only ends the snapshot
	func() {
		defer func() {
			if v := recover(); v != nil {
				panic(userPanic{v})
			}
		}()
		err = fn(tx)
	}()
	return err
}
