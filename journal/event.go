// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"fmt"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// Event is Builder for the run of the enqueue it is passed to: the store gives it the run id with the
// seq (outbox.RunBuilder), so the run id is written once, in the enqueue call:
//
//	s.EnqueueTx(ctx, tx, runID, journal.Event("order_placed", v))
//
// renders, byte for byte, the line that
//
//	s.EnqueueTx(ctx, tx, runID, journal.Builder(runID, "order_placed", v))
//
// does, with the same options (WithTraceContext), and given WithOnceKey(key) when the enqueue is an
// EnqueueOnce of key. Passed to EnqueueOnce or EnqueueOnceTx, it writes
// the call's once key as the line's "once_key" member (OnceKeyMember), as Builder does given
// WithOnceKey, so that the journal can give a book that lost its ledger the keys back (outbox
// reconcile). Like any builder from outbox.RunBuilder, it renders only inside an enqueue of a Store:
// called directly it returns an error and no line.
func Event(eventType string, data any, opts ...BuilderOption) outbox.EventBuilder {
	c, bad := builderOptions(eventType, opts)
	return outbox.CallBuilder(func(call outbox.EnqueueCall) ([]byte, error) {
		bad := bad
		if bad == nil && c.onceKey != "" && c.onceKey != call.OnceKey {
			bad = fmt.Errorf("%w: WithOnceKey(%.64q) given to the Event of an enqueue of once key %.64q", ErrOnceKey, c.onceKey, call.OnceKey)
		}
		if bad != nil {
			return nil, fmt.Errorf("journal: render %.64q line %d: %w", eventType, call.Seq, bad)
		}
		return c.render(call.RunID, call.Seq, eventType, call.OnceKey, data)
	})
}

// now is the clock a line's "at" is read from; a test fixes it to compare the lines two builders
// render.
var now = time.Now
