// SPDX-License-Identifier: Apache-2.0

package journal

import (
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
// does, with the same options (WithTraceContext). Like any builder from outbox.RunBuilder, it renders only inside an enqueue of a Store:
// called directly it returns an error and no line.
func Event(eventType string, data any, opts ...BuilderOption) outbox.EventBuilder {
	return outbox.RunBuilder(func(runID string, seq int64) ([]byte, error) {
		return Builder(runID, eventType, data, opts...)(seq)
	})
}

// now is the clock a line's "at" is read from; a test fixes it to compare the lines two builders
// render.
var now = time.Now
