// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ncruces/go-sqlite3"
)

// A caller branches on context.Canceled and context.DeadlineExceeded to tell its own shutdown or
// deadline from a failure: a failed enqueue taken for the caller's own cancellation is dropped without
// a word. So an error wraps a context's error only when the caller's context ended, or the operation
// timeout that stands in for the caller's missing deadline passed. The floor's own contexts say why
// they end, as their cause, so that no mapping of an error made after the work ended one (a group's
// statements once it has committed, say) or after a bound of the owner's own passed (one no caller's
// deadline covers) passes for the caller's end.

// errOpDone is the cause of a context that its owner ended itself, once the work it bounded was over:
// an error mapped afterwards is not the context's.
var errOpDone = errors.New("the operation is over")

// BoundErr is the cause of a bound set on work that is no single caller's: a group's statements, the
// record of a batch the sink already holds. It does not wrap context.DeadlineExceeded, since no
// caller's deadline passed.
type BoundErr struct{ Msg string }

func (e *BoundErr) Error() string { return e.Msg }

// Bounded returns a context under parent that ends after d: with cause as its cause
// (context.DeadlineExceeded when cause is nil, for the operation timeout, the caller's deadline by
// proxy), and with errOpDone when its owner calls its cancel.
func Bounded(parent context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	outer, end := context.WithCancelCause(parent)
	ctx, cancel := context.WithTimeoutCause(outer, d, cause)
	return ctx, func() {
		end(errOpDone) // first: the inner context takes its cause from here, unless it ended before
		cancel()
	}
}

// EndOf returns why ctx ended as the caller is to be told it: nil while it has not, and nil when its
// owner ended it after the work (errOpDone); the bound's own error, not a context's, when a bound of
// the owner's passed; the context's error otherwise (the caller's end, or the operation
// timeout).
func EndOf(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if cause == errOpDone {
		return nil
	}
	if b, ok := cause.(*BoundErr); ok {
		return b
	}
	return err
}

// WithEnd joins why ctx ended (see EndOf) to err, which may say only SQLITE_INTERRUPT, or be the
// context's bare error that database/sql returns for a wait it gave up.
func WithEnd(ctx context.Context, err error) error {
	why := EndOf(ctx)
	switch {
	case err == nil, why == nil:
		return err
	case why != ctx.Err():
		// A bound of the owner's: the context's error must not be in the chain.
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w (%v)", why, err)
		}
		return fmt.Errorf("%w: %w", why, err)
	case errors.Is(err, why):
		return err
	}
	return fmt.Errorf("%w: %w", why, err)
}

// Interrupted is WithEnd for an error of the caller's own code (a function given a transaction),
// which is the caller's to word: only SQLite's SQLITE_INTERRUPT, a statement its context ended, says
// nothing a caller branches on, and has why ctx ended joined to it. Any other error is returned as it
// is, even when ctx has ended meanwhile.
func Interrupted(ctx context.Context, err error) error {
	if !errors.Is(err, sqlite3.INTERRUPT) {
		return err
	}
	return WithEnd(ctx, err)
}
