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
	return CallBuilder(func(c EnqueueCall) ([]byte, error) { return build(c.RunID, c.Seq) })
}

// EnqueueCall is what the store tells a builder from CallBuilder of the enqueue it renders for.
type EnqueueCall struct {
	RunID string
	Seq   int64
	// OnceKey is the call's once key (EnqueueOnce, EnqueueOnceTx), empty for an enqueue without one.
	// A line format that carries it (journal.Event writes "once_key") lets a ledger lost with its
	// book be rebuilt from the sink.
	OnceKey string
}

// CallBuilder is RunBuilder given the whole call: the run id, the seq and the once key. It works, as
// RunBuilder's does, only when passed to the store's enqueue methods.
func CallBuilder(build func(c EnqueueCall) ([]byte, error)) EventBuilder {
	if build == nil {
		return nil
	}
	req := &runRequest{build: build}
	return func(int64) ([]byte, error) { return nil, req }
}

// runRequest is what an EventBuilder from RunBuilder returns: not a failure but a request for the
// run id, which only the store, holding the call's run id, answers. It travels as the builder's error
// because EventBuilder's signature has no room for the run id; the store recognises it only
// unwrapped, as the builder returned it.
type runRequest struct {
	build func(c EnqueueCall) ([]byte, error)
}

func (*runRequest) Error() string {
	return "outbox: an EventBuilder from RunBuilder renders only inside an enqueue of the store, which gives it the run id"
}
