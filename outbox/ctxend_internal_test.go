// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
)

// TestAnErrorWrapsAContextsEndOnlyWhenTheCallersContextEnded maps a driver error under each way a
// context of the store's can end: only the caller's cancellation and the operation timeout that
// stands in for the caller's deadline may put a context's error in the chain; the store's own end of
// a context after the work, and a bound of its own that no caller set, may not.
func TestAnErrorWrapsAContextsEndOnlyWhenTheCallersContextEnded(t *testing.T) {
	ioErr := error(sqlite3.IOERR)
	isCtx := func(err error) bool {
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	}

	// The store ends its own context once the work is over, then maps the work's error.
	ctx, cancel := bounded(context.Background(), time.Hour, nil)
	cancel()
	if err := mapErr(ctx, ioErr); isCtx(err) || !errors.Is(err, sqlite3.IOERR) {
		t.Errorf("after the store's own cancel: %v, want the I/O error alone", err)
	}
	if err := endOf(ctx); err != nil {
		t.Errorf("endOf after the store's own cancel: %v, want nil", err)
	}

	// A bound of the store's own passes (a group's statements, a batch's record).
	for _, bound := range []error{errGroupOverran, errRecordOverran} {
		ctx, cancel = bounded(context.Background(), time.Nanosecond, bound)
		<-ctx.Done()
		for _, in := range []error{ioErr, sqlite3.INTERRUPT, context.DeadlineExceeded} {
			err := mapErr(ctx, in)
			if isCtx(err) || !errors.Is(err, bound) {
				t.Errorf("bound %v passed, %v mapped: %v, want the bound's error and no context's", bound, in, err)
			}
		}
		cancel()
		if err := mapErr(ctx, ioErr); !errors.Is(err, bound) || isCtx(err) {
			t.Errorf("bound passed, then cancelled by the store: %v, want the bound's error", err)
		}
	}

	// The caller cancels, and the store then ends its context as well.
	parent, stop := context.WithCancel(context.Background())
	ctx, cancel = bounded(parent, time.Hour, nil)
	stop()
	cancel()
	if err := mapErr(ctx, sqlite3.INTERRUPT); !errors.Is(err, context.Canceled) || !errors.Is(err, sqlite3.INTERRUPT) {
		t.Errorf("caller cancelled: %v, want context.Canceled with the driver's error", err)
	}

	// The operation timeout passes: the caller's deadline by proxy.
	ctx, cancel = bounded(context.Background(), time.Nanosecond, nil)
	<-ctx.Done()
	cancel()
	if err := mapErr(ctx, sqlite3.INTERRUPT); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("operation timeout passed: %v, want context.DeadlineExceeded", err)
	}
}
