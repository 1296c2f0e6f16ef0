// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/textmachine/outbox/internal/litedb"
)

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
// is read-only (PRAGMA query_only): a write in it fails. fn's error is returned as it is (with
// ctx's error joined to a statement ctx interrupted, SQLITE_INTERRUPT); if fn panics, the
// transaction ends and the panic continues. The operation timeout (WithOpTimeout) bounds fn when ctx
// has no deadline.
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
		err = litedb.Interrupted(ctx, fn(tx))
	}()
	return err
}
