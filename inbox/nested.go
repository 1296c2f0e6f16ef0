// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
)

// ErrCallInsideTx is returned at once by a call that writes (Apply, ApplyFrom, ApplyFile, FollowFile,
// WriteTx, Release, AcceptGap, ForgetFile) made from inside a write transaction of the same inbox: from
// a WriteTx function or a handler, whatever context it is given. That transaction holds the inbox's
// one writer, so the call would wait for itself until its context ended. Write through the
// transaction the function or the handler was given instead; ReadTx and the other reads use the read
// pool and work there (a handler's own context excepted: ErrInHandler).
//
// The inbox knows the goroutine that holds the writer, so a call made on that goroutine is caught
// (see litedb.Holder), at the cost of an atomic load while no write transaction is open. A call that
// the function hands to another goroutine and then waits for cannot be told from any other
// caller's: it waits for the writer until its own context ends.
var ErrCallInsideTx = errors.New("inbox: a call from inside a write transaction of the same inbox (a WriteTx function or a handler called a method that writes); the transaction holds the inbox's one writer, so the call would wait for itself: write through the transaction it was given instead")

// insideTx is the error of a write called from inside the inbox's own transaction: ErrCallInsideTx,
// and ErrInHandler as well when a handler made the call.
type insideTx struct{ handler bool }

func (e *insideTx) Error() string {
	if e.handler {
		return "inbox: called from inside a handler of the same inbox; the handler's transaction holds the inbox's one writer, so the call would wait for itself: write through the handler's tx instead"
	}
	return ErrCallInsideTx.Error()
}

func (e *insideTx) Is(target error) bool {
	return target == ErrCallInsideTx || e.handler && target == ErrInHandler
}

// checkNotInsideTx fails a write begun from inside a write transaction of this inbox: on the
// goroutine that holds the writer, or with the context a handler was given.
func (in *Inbox) checkNotInsideTx(ctx context.Context) error {
	if in.wr.Marked(ctx) {
		return &insideTx{handler: true}
	}
	if in.wr.Inside(nil) {
		return &insideTx{handler: in.handling.Load()}
	}
	return nil
}

// ReadTx runs fn in one read transaction on the read pool, for the platform's own reads: every query
// of fn sees the same snapshot, whatever commits meanwhile. It never takes the writer, so it never
// waits for a running Apply nor delays one, and it works inside a WriteTx function or a handler
// (given another context than the handler's), where it does not see that transaction's uncommitted
// writes. The transaction is read-only (PRAGMA query_only): a write in it fails. fn holds a
// connection of the read pool, so the inbox's reads (Position, ReadTx, …) made from inside it fail
// at once with ErrCallInsideTx rather than wait for another, which may never come: query through tx.
// fn's error is returned as it is; if fn panics, the transaction ends and the panic goes on. fn must
// not keep tx.
// On an inbox opened with OpenReadOnly beside a running consumer, fn may run again when its first
// read met a commit that it could not wait out (see OpenReadOnly).
func (in *Inbox) ReadTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return errors.New("inbox: ReadTx with a nil function")
	}
	return in.read(ctx, func() error {
		tx, err := in.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return wrapf(err, "begin a read")
		}
		defer tx.Rollback() // nothing to commit: the rollback only ends the snapshot
		defer in.readers.Release(in.readers.Hold())
		return fn(tx)
	})
}

// errCloseInside is Close's error when called from inside a call of the same inbox, which Close would
// wait for.
var errCloseInside error = closeInside{}

type closeInside struct{}

func (closeInside) Error() string {
	return "inbox: Close called from inside a call of the same inbox (a WriteTx or ReadTx function or a handler), which it would wait for: close the inbox once that call has returned"
}

func (closeInside) Is(target error) bool { return target == ErrCallInsideTx }

// insideCall reports whether the calling goroutine runs a function the inbox called, a WriteTx or
// ReadTx function or a handler: a Close there would wait for the call it is part of.
func (in *Inbox) insideCall() bool { return in.wr.Inside(nil) || in.readers.Inside() }

// errReadInsideRead is the error of a read of the inbox made from inside a ReadTx function: that
// function holds a connection of the read pool, and the read would wait for another, forever once
// every one is held so.
var errReadInsideRead error = readInsideRead{}

type readInsideRead struct{}

func (readInsideRead) Error() string {
	return "inbox: a read of the inbox from inside a ReadTx function, which holds a connection of the read pool the read would wait for: query through the function's tx instead"
}

func (readInsideRead) Is(target error) bool { return target == ErrCallInsideTx }

// insideRead reports whether the calling goroutine runs a ReadTx function; it costs an atomic load
// while none runs.
func (in *Inbox) insideRead() bool { return in.readers.Inside() }
