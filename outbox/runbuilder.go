// SPDX-License-Identifier: Apache-2.0

package outbox

// RunBuilder returns an EventBuilder that is given the run id of the enqueue it is passed to as well
// as the seq the store assigns, so that a line format keyed by its run (the journal's) needs the run
// id once, in the enqueue, instead of once more in the builder:
//
//	s.EnqueueTx(ctx, tx, runID, journal.Event("order_placed", v))
//
// build is called exactly as any EventBuilder is, at the same moment and under the same rules (a nil
// line declines; an error or a panic stores nothing). The EventBuilder it returns works only when
// passed to the store's enqueue methods: called directly, or by a builder that wraps it, it renders
// nothing and returns an error that says so, since it has no run to render for.
func RunBuilder(build func(runID string, seq int64) ([]byte, error)) EventBuilder {
	if build == nil {
		return nil // refused as a nil EventBuilder by every enqueue
	}
	req := &runRequest{build: build}
	return func(int64) ([]byte, error) { return nil, req }
}

// runRequest is what an EventBuilder from RunBuilder returns: not a failure but a request for the
// run id, which only the store, holding the call's run id, answers. It travels as the builder's error
// because EventBuilder's signature has no room for the run id; the store recognises it only
// unwrapped, as the builder returned it.
type runRequest struct {
	build func(runID string, seq int64) ([]byte, error)
}

func (*runRequest) Error() string {
	return "outbox: an EventBuilder from RunBuilder renders only inside an enqueue of the store, which gives it the run id"
}
