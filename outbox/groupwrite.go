// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// A builder is the caller's code, and it runs on the committer's goroutine between the other calls
// of its group, whose callers wait for the group's commit. So a builder that is slow, or never
// returns, must not be allowed to hold them: each caller's wait is bounded by its own deadline (its
// context's, or the operation timeout), and a caller whose deadline passes hurries its group (see
// committer.late). The committer then runs no further builder in that group, and a builder running at
// that moment is given up on: the goroutine that hurried the group takes it over, fails the
// builder's call with ErrBuilderStuck (nothing of it is stored: its line was never inserted), commits
// the calls that ran before it, hands back the calls after it to the next group, and goes on as the
// committer. The builder's goroutine, when the builder returns, finds the group taken and lets go of
// it without touching the transaction.
//
// Handing a group over needs the committer to be outside the store's own code, or two goroutines
// would use one transaction: so it happens only while a builder runs, which the committer marks on
// either side of the call (phase). Outside a builder the committer is in a statement, bounded by the
// operation timeout, and a hurried group stops at the next call. That costs each call two atomic
// operations and a clock reading, not a goroutine or a timer: BenchmarkProducersRatio is unchanged.

// A group's phases: who may touch its transaction.
const (
	phaseWriting  int32 = iota // the committer, in the store's own code
	phaseBuilding              // the committer, in a builder: the group may be taken over
	phaseTaken                 // another goroutine, which took it over from a builder (or a Goexit)
)

// groupRun is one group being written: its calls, their results and its transaction.
type groupRun struct {
	c       *committer
	taken   []*request
	results []result
	tx      *sql.Tx
	w       *txWriter          // on tx, with the lines its calls inserted (see lineCounts)
	ctx     context.Context    // the operation timeout, for the group's statements (errGroupOverran)
	cancel  context.CancelFunc // nil without an operation timeout
	bracket bool               // the durability's group bracket is open (see durability.groupStart)
	ended   bool               // and closed again, with the statements' timeout

	phase atomic.Int32
	cut   atomic.Bool // a caller's deadline has passed: run no further builder, commit

	// The builder running, set before phase becomes phaseBuilding.
	at    int
	seq   int64
	since time.Time
	// returned is set once a builder given up on has returned, for Close's account of stuck ones.
	returned atomic.Bool
	stuck    error
}

// ErrBuilderStuck is returned when an EventBuilder run by the group committer did not return in time:
// by the deadline of its own call, or of another call grouped with it, or within Close's wait. Its
// call failed and nothing of it is stored; the builder is left to return on its own, and its line is
// thrown away. Close returns it too, naming every such builder that has still not returned.
var ErrBuilderStuck = errors.New("outbox: a builder did not return in time")

// errCut and errAbandoned end a call at its builder: errCut before the builder ran, the group being
// hurried; errAbandoned after it returned, the group having been taken over meanwhile.
var (
	errCut       = errors.New("outbox: group cut before the call's builder")
	errAbandoned = errors.New("outbox: group taken over while the call's builder ran")
)

// enterBuilder marks the start of the builder of line seq, or refuses it (errCut) when the group is
// being hurried or the store given up. The phase is set before the flags are read, and a hurrying
// caller sets its flag before it reads the phase, so one of the two always sees the other.
func (g *groupRun) enterBuilder(seq int64) error {
	g.seq, g.since = seq, time.Now()
	g.phase.Store(phaseBuilding)
	if !g.cut.Load() && !g.c.givenUp.Load() {
		return nil
	}
	if g.phase.CompareAndSwap(phaseBuilding, phaseWriting) {
		return errCut
	}
	g.returned.Store(true) // taken over before the builder ran
	return errAbandoned
}

// leaveBuilder marks the end of a builder; errAbandoned when the group was taken over meanwhile, and
// this goroutine must let go of it.
func (g *groupRun) leaveBuilder() error {
	if g.phase.CompareAndSwap(phaseBuilding, phaseWriting) {
		return nil
	}
	g.returned.Store(true)
	return errAbandoned
}

// expedite hurries g for late, a caller whose deadline has passed (nil: Close, which has waited its
// time): no further builder runs in it, and a builder running now is given up on, its group taken
// over by a new goroutine.
func (g *groupRun) expedite(late *request) {
	g.cut.Store(true)
	if !g.phase.CompareAndSwap(phaseBuilding, phaseTaken) {
		return // between builders: the committer stops at the next one, or commits
	}
	r := g.taken[g.at]
	why := "within Close's wait"
	switch {
	case late == r:
		why = "by its caller's deadline"
	case late != nil:
		why = fmt.Sprintf("by the deadline of a call of run %q grouped with it", late.runID)
	}
	g.stuck = fmt.Errorf("%w: building line %d of run %q%s, it ran %v without returning %s; nothing of the call is stored",
		ErrBuilderStuck, g.seq, r.runID, describeOnce(r.onceKey), time.Since(g.since).Round(time.Millisecond), why)
	g.c.mu.Lock()
	g.c.stuck = append(slices.DeleteFunc(g.c.stuck, func(o *groupRun) bool { return o.returned.Load() }), g)
	g.c.mu.Unlock()
	go g.takeOver()
}

func describeOnce(key string) string {
	if key == "" {
		return " (EnqueueEvent)"
	}
	return fmt.Sprintf(" (EnqueueOnce, key %q)", key)
}

// takeOver finishes a group whose builder was given up on and goes on as the committer: the builder's
// call fails, the calls before it commit, the calls after it go to the next group.
func (g *groupRun) takeOver() {
	g.results[g.at] = result{err: g.stuck}
	n := g.at + 1
	g.commitGroup(n)
	carry := g.deliver(n)
	g.c.run(carry)
}

// stuckErr names the builders given up on that have still not returned.
func (c *committer) stuckErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, g := range c.stuck {
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
		g.expedite(nil)
	}
}

// commit runs the calls of group that are still wanted in one transaction and delivers their results.
// It returns the calls it took but left for the next group: once the group holds maxGroupBytes of
// lines (a producer of large lines then delays the others by about one large write, not by a group of
// them), or when it was hurried. owned is false when another goroutine took the group over, and with
// it the committer's loop.
func (c *committer) commit(group []*request) (carry []*request, owned bool) {
	taken := group[:0]
	for _, r := range group {
		// A call carried from the last group is taken already; a new one may have been withdrawn.
		if r.state.Load() == reqTaken || r.state.CompareAndSwap(reqQueued, reqTaken) {
			taken = append(taken, r)
		}
	}
	if len(taken) == 0 {
		return nil, true
	}
	if c.givenUp.Load() {
		for _, r := range taken {
			r.done <- result{err: fmt.Errorf("%w: Close gave up waiting for the calls in flight", ErrClosed)}
		}
		return nil, true
	}
	if len(c.large) > 0 && c.isLarge(taken[0].runID) {
		// A large line comes next: the commits already written become durable first, in a sync
		// that does not carry its pages (see maxLargeRuns). Their callers may have started that
		// sync already; this joins it. A failed sync is theirs to report, and the group's own
		// write then fails on it.
		c.s.dur.waitWritten()
	}
	g := &groupRun{c: c, taken: slices.Clone(taken), results: make([]result, len(taken))}
	for _, r := range g.taken {
		r.group.Store(g)
	}
	c.current.Store(g)
	n, owned := c.write(g)
	if !owned {
		return nil, false
	}
	return g.deliver(n), true
}

// deliver hands the first n calls their results, and returns the rest, for the next group.
func (g *groupRun) deliver(n int) (carry []*request) {
	g.c.current.CompareAndSwap(g, nil)
	for i, r := range g.taken[:n] {
		r.done <- g.results[i]
	}
	return g.taken[n:]
}

// errBuilderExited fails the calls of a group in which a builder called runtime.Goexit.
var errBuilderExited = errors.New("outbox: a builder called runtime.Goexit; its group was rolled back")

// write writes the first calls of g into its transaction and commits it, filling their results; it
// returns how many calls the group holds, and whether this goroutine still owns it.
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
		g.endBracket()
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

// failAll fails every call of the first n that has not failed already.
func (g *groupRun) failAll(n int, err error) {
	for i := range g.results[:n] {
		if g.results[i].err == nil && !g.results[i].panicked {
			g.results[i] = result{err: err}
		}
	}
}

// endBracket ends the group for the durability's syncs and the statements' timeout, once.
func (g *groupRun) endBracket() {
	if g.ended {
		return
	}
	g.ended = true
	if g.bracket {
		g.c.s.dur.groupEnd()
	}
	if g.cancel != nil {
		g.cancel()
	}
}

// writeGroup is write's body. A panic inside the driver or SQLite fails the calls with ErrStoreBroken,
// on this goroutine, which no caller owns; it can only come from the store's own code, which no other
// goroutine takes over from.
func (c *committer) writeGroup(g *groupRun) (n int, owned bool) {
	n = len(g.taken)
	defer func() {
		if v := recover(); v != nil {
			g.failAll(n, c.s.breakDown(v))
			g.endBracket()
			owned = true
		}
	}()
	// The group's statements are no single caller's: each caller's own deadline is its wait in
	// submit. Their bound is the store's, and its passing is not a caller's deadline.
	g.ctx = context.Background()
	if c.s.cfg.opTimeout > 0 {
		g.ctx, g.cancel = bounded(g.ctx, c.s.cfg.opTimeout, errGroupOverran)
	}
	// The transaction takes no context: its end would make database/sql close the writer
	// connection (see Store.write). The statements take the operation timeout.
	tx, err := c.s.w.BeginTx(context.Background(), nil)
	if err != nil {
		g.failAll(n, fmt.Errorf("begin: %w", mapErr(g.ctx, err)))
		g.endBracket()
		return n, true
	}
	g.tx = tx
	// A sync about to start waits for this group rather than leave its callers to the next one.
	c.s.dur.groupStart()
	g.bracket = true
	w := c.s.newTxWriter(g.ctx, tx, c.s.stmts, &lineCounts{}) // carries each run's last seq from call to call
	w.group = g
	g.w = w
	bytes := 0
	for i, r := range g.taken {
		if g.cut.Load() {
			n = i // hurried: what has run commits now, the rest in the next group
			break
		}
		if i > 0 && !r.deferred && len(c.large) > 0 && c.isLarge(r.runID) {
			// A large line goes in a group of its own, after the small calls before it; this
			// call goes first in the next group.
			r.deferred = true
			n = i
			break
		}
		if !r.state.CompareAndSwap(reqTaken, reqRunning) {
			// Withdrawn while the group waited (for the writer, or for the calls before it). No one
			// reads this result: its caller returned its own context's error (see late).
			g.results[i] = result{err: errLate}
			continue
		}
		if r.late.Load() {
			g.results[i] = result{err: errLate}
			continue
		}
		g.at = i
		seq, size, err := c.s.enqueue(r.ctx, w, r.runID, r.onceKey, r.build)
		if err == errAbandoned {
			return 0, false
		}
		if err == errCut {
			r.state.Store(reqTaken) // not run: it goes to the next group
			n = i
			break
		}
		if up, ok := err.(userPanic); ok {
			g.results[i] = result{panicked: true, panicVal: up.val}
			continue
		}
		g.results[i] = result{seq: seq, err: err}
		if err == nil {
			c.noteLine(r.runID, size)
		}
		if err != nil {
			// A failed statement undoes itself, unless SQLite ended the whole transaction.
			if lost := c.s.txLost(); lost != nil {
				n = i + 1
				c.s.rollback(tx)
				g.failAll(n, lost)
				g.endBracket()
				return n, true
			}
			continue
		}
		if bytes += size; bytes >= maxGroupBytes {
			n = i + 1
			break
		}
	}
	g.commitGroup(n)
	return n, true
}

// commitGroup commits the first n calls of g, whose builders have all returned or been given up on.
func (g *groupRun) commitGroup(n int) {
	s := g.c.s
	defer func() {
		if v := recover(); v != nil {
			g.failAll(n, s.breakDown(v))
			g.endBracket()
		}
	}()
	// The group's lines, one upsert per run, whatever its calls' deadlines: like the COMMIT after it,
	// this is no single caller's, and the calls that ran are to commit. A builder given up on inserted
	// nothing, and its goroutine touches the writer no more (see takeOver).
	if err := g.w.addCounts(context.WithoutCancel(g.ctx)); err != nil {
		s.rollback(g.tx)
		g.endBracket()
		g.failAll(n, err)
		return
	}
	faultpoint.Hit(faultpoint.BeforeCommit)
	ticket, err := s.commitTx(g.tx, durable, n)
	g.endBracket()
	if err != nil {
		g.failAll(n, fmt.Errorf("commit: %w", mapErr(g.ctx, err)))
		return
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	s.signalCommit()
	// The callers wait for the sync themselves, so the next group begins while the disk works.
	for i := range g.results[:n] {
		g.results[i].ticket = ticket
	}
}
