// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A caller branches on context.Canceled and context.DeadlineExceeded to tell its own shutdown or
// deadline from a failure: a failed enqueue taken for the caller's own cancellation is dropped without
// a word. So an error of the store's wraps a context's error only when the caller's context ended, or
// the operation timeout that stands in for the caller's missing deadline (WithOpTimeout) passed. The
// store's own contexts say why they end, as their cause, so that no mapping of an error made after
// the store ended one (a group's statements once it has committed, say) or after a bound of the
// store's own passed (one no caller's deadline covers) passes for the caller's end.

// errOpDone is the cause of a context of the store's that it ended itself, once the work it bounded
// was over: an error mapped afterwards is not the context's.
var errOpDone = errors.New("outbox: the operation is over")

// boundErr is the cause of a bound the store sets on work that is no single caller's: a group's
// statements, the record of a batch the sink already holds. It does not wrap
// context.DeadlineExceeded, since no caller's deadline passed.
type boundErr struct{ what string }

func (e *boundErr) Error() string { return "outbox: " + e.what }

var (
	// errGroupOverran ends the statements of a group commit that run past the operation timeout.
	errGroupOverran = &boundErr{"a statement of the group commit ran past the operation timeout (WithOpTimeout)"}
	// errRecordOverran ends the record of a relay's batch that runs past the operation timeout
	// (DefaultOpTimeout when the store has none).
	errRecordOverran = &boundErr{"the record of the batch ran past the operation timeout (WithOpTimeout)"}
)

// bounded returns a context of the store's under parent that ends after d: with cause as its cause
// (context.DeadlineExceeded when cause is nil, for the operation timeout, the caller's deadline by
// proxy), and with errOpDone when the store calls its cancel.
func bounded(parent context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	outer, end := context.WithCancelCause(parent)
	ctx, cancel := context.WithTimeoutCause(outer, d, cause)
	return ctx, func() {
		end(errOpDone) // first: the inner context takes its cause from here, unless it ended before
		cancel()
	}
}

// endOf returns why ctx ended as the caller is to be told it: nil while it has not, and nil when the
// store ended it itself after the work (errOpDone); the bound's own error, not a context's, when a
// bound of the store's passed; the context's error otherwise (the caller's end, or the operation
// timeout).
func endOf(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if cause == errOpDone {
		return nil
	}
	if b, ok := cause.(*boundErr); ok {
		return b
	}
	return err
}

// withEnd joins why ctx ended (see endOf) to err, which may say only SQLITE_INTERRUPT, or be the
// context's bare error that database/sql returns for a wait it gave up.
func withEnd(ctx context.Context, err error) error {
	why := endOf(ctx)
	switch {
	case why == nil:
		return err
	case why != ctx.Err():
		// A bound of the store's: the context's error must not be in the chain.
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w (%v)", why, err)
		}
		return fmt.Errorf("%w: %w", why, err)
	case errors.Is(err, why):
		return err
	}
	return fmt.Errorf("%w: %w", why, err)
}
