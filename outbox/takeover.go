// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Giving up on a stuck builder: the promise that no caller waits past its own deadline (its
// context's, or the operation timeout) for another caller's builder.
//
// A builder is the caller's code, and it runs on the committer's goroutine between the other calls
// of its group, whose callers wait for the group's commit. A caller whose deadline passes withdraws
// its call if it has not run (deadlinePassed); otherwise it stops its group (stopBuilders): no
// further builder runs in it, and a builder running at that moment is given up on. The caller's
// goroutine then takes the group over from the builder's goroutine (commitPastStuckBuilder): it fails
// the builder's call with ErrBuilderStuck, commits the calls that ran before it, carries the calls
// after it to the next group, and goes on as the committer. The builder's goroutine, when the builder
// returns, finds the group taken and lets go of it.
//
// Invariants, each relied on by the code below and by committer.writeGroup:
//
//  1. One owner. Exactly one goroutine at a time touches a group's transaction, the writer connection
//     and the committer's loop: the committer, or the goroutine that took the group over. Ownership
//     passes only by a compare-and-swap of the group's phase (phaseBuilding to phaseTaken) or by a go
//     statement, which order every access on either side.
//  2. Taken over only inside a builder. A group changes hands only while its owner runs a builder
//     (phaseBuilding); in the store's own code the owner is in a statement bounded by the operation
//     timeout, and a stopped group stops at the next call instead.
//  3. No builder starts unseen. enterBuilder stores the phase before it reads stopBuilding and
//     givenUp; stopBuilders stores stopBuilding before it swaps the phase. So either the builder is
//     refused before it runs (errNotBuilt), or the builder is running and is given up on.
//  4. A builder given up on stored nothing. Its insert follows it, and its goroutine, once it
//     returns, finds phaseTaken and unwinds with errGroupTakenOver without touching the transaction:
//     write returns owned=false and the committer's loop on that goroutine ends.
//  5. One result per call. Whoever owns the group at its end delivers the results of the calls that
//     ran (deliver), and carries the rest to the next group; a withdrawn call's result is read by no
//     one (errCallerGone).
//  6. Bounded wait. A caller whose deadline passes has its outcome within about one statement and
//     one commit, whatever the builders do, and it is the truth: committed, or not stored.
//  7. Close names what it gave up on. A group whose builder was given up on stays in
//     stuckBuilders.groups until the builder returns, so Close returns ErrBuilderStuck naming it.
//  8. A Goexit ends only its group. A builder that calls runtime.Goexit ends the owner's goroutine
//     past any recover: write's deferred function then takes the group (invariant 1), rolls it back,
//     fails its calls (errBuilderExited) and starts a new committer goroutine, unless the group was
//     taken over already.
//
// This costs each call two atomic operations and a clock reading, not a goroutine or a timer:
// BenchmarkProducersRatio is unchanged by it.

// A group's phases: who may touch its transaction.
const (
	phaseWriting  int32 = iota // the committer, in the store's own code
	phaseBuilding              // the committer, in a builder: the group may be taken over
	phaseTaken                 // another goroutine, which took it over from a builder (or a Goexit)
)

// builderWatch is a group's state for giving up on its builder.
type builderWatch struct {
	phase atomic.Int32
	// stopBuilding is set once a caller's deadline has passed: run no further builder, commit.
	stopBuilding atomic.Bool

	// The builder running, set before phase becomes phaseBuilding.
	building      int // its call's index in taken
	buildingSeq   int64
	buildingSince time.Time
	// returned is set once a builder given up on has returned, for Close's account of stuck ones.
	returned atomic.Bool
	stuck    error
}

// callerWatch is a call's state for its caller's deadline.
type callerWatch struct {
	// callerGone is set once the caller's own deadline has passed: a call that has not run yet is
	// then not run (errCallerGone).
	callerGone atomic.Bool
	// group is the group the call runs in, which its caller stops (stopBuilders).
	group atomic.Pointer[groupRun]
}

// stuckBuilders is the committer's state for giving up on builders.
type stuckBuilders struct {
	// current is the group being written, for a caller whose deadline passes and for Close.
	current atomic.Pointer[groupRun]
	// givenUp is set once Close has waited its time: no builder runs any more, and the calls still
	// queued fail with ErrClosed.
	givenUp atomic.Bool

	mu     sync.Mutex
	groups []*groupRun // groups whose builder was given up on, until it returns (for Close's error)
}

// errNotBuilt and errGroupTakenOver end a call at its builder: errNotBuilt before the builder ran, the
// group being stopped; errGroupTakenOver after it returned, the group having been taken over
// meanwhile.
var (
	errNotBuilt       = errors.New("outbox: group stopped before the call's builder")
	errGroupTakenOver = errors.New("outbox: group taken over while the call's builder ran")
)

// errCallerGone fails a call that had not run when its caller's deadline passed; the caller returns
// its own error instead.
var errCallerGone = errors.New("outbox: the caller's deadline passed before its call ran")

// errBuilderExited fails the calls of a group in which a builder called runtime.Goexit.
var errBuilderExited = errors.New("outbox: a builder called runtime.Goexit; its group was rolled back")

// deadlinePassed is what a caller whose deadline (err) has passed is told. A call not yet run is
// withdrawn and never runs. A call in a group, run or about to be, cannot be taken out of it (a later
// call of the same run may already number on from it), so the caller stops the group instead (see
// stopBuilders).
func (c *committer) deadlinePassed(r *request, err error) result {
	r.callerGone.Store(true)
	if r.state.CompareAndSwap(reqQueued, reqWithdrawn) || r.state.CompareAndSwap(reqTaken, reqWithdrawn) {
		return result{err: err}
	}
	if g := r.group.Load(); g != nil {
		g.stopBuilders(r)
	}
	res := <-r.done
	switch {
	case res.err == errCallerGone:
		res.err = err
	case errors.Is(res.err, ErrBuilderStuck) && !errors.Is(res.err, err):
		res.err = fmt.Errorf("%w (%w)", res.err, err)
	}
	return res
}

// enterBuilder marks the start of the builder of line seq, or refuses it (errNotBuilt) when the
// group is stopped or the store has given up (invariant 3).
func (g *groupRun) enterBuilder(seq int64) error {
	g.buildingSeq, g.buildingSince = seq, time.Now()
	g.phase.Store(phaseBuilding)
	if !g.stopBuilding.Load() && !g.c.givenUp.Load() {
		return nil
	}
	if g.phase.CompareAndSwap(phaseBuilding, phaseWriting) {
		return errNotBuilt
	}
	g.returned.Store(true) // taken over before the builder ran
	return errGroupTakenOver
}

// leaveBuilder marks the end of a builder; errGroupTakenOver when the group was taken over
// meanwhile, and this goroutine must let go of it.
func (g *groupRun) leaveBuilder() error {
	if g.phase.CompareAndSwap(phaseBuilding, phaseWriting) {
		return nil
	}
	g.returned.Store(true)
	return errGroupTakenOver
}

// stopBuilders stops g for by, a caller whose deadline has passed (nil: Close, which has waited its
// time): no further builder runs in it, and a builder running now is given up on, its group taken
// over by a new goroutine.
func (g *groupRun) stopBuilders(by *request) {
	g.stopBuilding.Store(true)
	if !g.phase.CompareAndSwap(phaseBuilding, phaseTaken) {
		return // between builders: the committer stops at the next one, or commits
	}
	r := g.taken[g.building]
	why := "within Close's wait"
	switch {
	case by == r:
		why = "by its caller's deadline"
	case by != nil:
		why = fmt.Sprintf("by the deadline of a call of run %q grouped with it", by.runID)
	}
	g.stuck = fmt.Errorf("%w: building line %d of run %q%s, it ran %v without returning %s; nothing of the call is stored",
		ErrBuilderStuck, g.buildingSeq, r.runID, describeOnce(r.onceKey), time.Since(g.buildingSince).Round(time.Millisecond), why)
	g.c.mu.Lock()
	g.c.groups = append(slices.DeleteFunc(g.c.groups, func(o *groupRun) bool { return o.returned.Load() }), g)
	g.c.mu.Unlock()
	go g.commitPastStuckBuilder()
}

func describeOnce(key string) string {
	if key == "" {
		return " (EnqueueEvent)"
	}
	return fmt.Sprintf(" (EnqueueOnce, key %q)", key)
}

// commitPastStuckBuilder finishes a group whose builder was given up on and goes on as the committer:
// the builder's call fails, the calls before it commit, the calls after it go to the next group.
func (g *groupRun) commitPastStuckBuilder() {
	g.results[g.building] = result{err: g.stuck}
	n := g.building + 1
	g.commitGroup(n)
	carry := g.deliver(n)
	g.c.run(carry)
}

// stuckErr names the builders given up on that have still not returned.
func (c *committer) stuckErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, g := range c.groups {
		if !g.returned.Load() {
			errs = append(errs, g.stuck)
		}
	}
	return errors.Join(errs...)
}

// giveUp is Close's, once it has waited its time for the calls in flight: no builder runs any more,
// and one running now is given up on.
func (c *committer) giveUp() {
	c.givenUp.Store(true)
	if g := c.current.Load(); g != nil {
		g.stopBuilders(nil)
	}
}

// write writes the first calls of g into its transaction and commits it, filling their results; it
// returns how many calls the group holds, and whether this goroutine still owns it (invariant 4).
//
// A builder runs on this goroutine, so one that calls runtime.Goexit (t.FailNow in a test) ends it
// half-way through a group, past any recover. Then the group's transaction is rolled back and every
// call taken gets errBuilderExited here, since the caller's delivery will not run, and a new
// goroutine runs the committer: no caller waits for ever, and the writer connection is not left in a
// transaction. Unless the group was taken over meanwhile: then it is no longer this goroutine's.
func (c *committer) write(g *groupRun) (n int, owned bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if !g.phase.CompareAndSwap(phaseBuilding, phaseTaken) && !g.phase.CompareAndSwap(phaseWriting, phaseTaken) {
			return // taken over while the builder ran: no longer this goroutine's
		}
		g.returned.Store(true)
		if g.tx != nil {
			c.s.rollback(g.tx)
		}
		g.finish()
		for i := range g.results {
			if g.results[i].err == nil && !g.results[i].panicked {
				g.results[i] = result{err: errBuilderExited}
			}
		}
		g.deliver(len(g.taken))
		go c.run(nil)
	}()
	n, owned = c.writeGroup(g)
	returned = true
	return n, owned
}
