// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// groupRun is one group being written: its calls, their results and its transaction. A caller whose
// deadline passes may stop it and give up on the builder it runs (see takeover.go, whose invariants
// writeGroup keeps: it checks stopBuilding before each call, and lets go of the group when a builder
// returns errGroupTakenOver).
type groupRun struct {
	c         *committer
	taken     []*request
	results   []result
	tx        *sql.Tx
	w         *txWriter          // on tx, with the lines its calls inserted (see lineCounts)
	ctx       context.Context    // the operation timeout, for the group's statements (errGroupOverran)
	cancel    context.CancelFunc // nil without an operation timeout
	syncWaits bool               // a sync about to start waits for this group (durability.groupStart)
	finished  bool               // the group is ended for the syncs and the statements' timeout
	builderWatch
}

// commit runs the calls of group that are still wanted in one transaction and delivers their results.
// It returns the calls it took but left for the next group: once the group holds maxGroupBytes of
// lines (a producer of large lines then delays the others by about one large write, not by a group of
// them), or when it was stopped. owned is false when another goroutine took the group over, and with
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

// failAll fails every call of the first n that has not failed already.
func (g *groupRun) failAll(n int, err error) {
	for i := range g.results[:n] {
		if g.results[i].err == nil && !g.results[i].panicked {
			g.results[i] = result{err: err}
		}
	}
}

// finish ends the group for the durability's syncs and the statements' timeout, once.
func (g *groupRun) finish() {
	if g.finished {
		return
	}
	g.finished = true
	if g.syncWaits {
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
			g.finish()
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
		g.finish()
		return n, true
	}
	g.tx = tx
	// A sync about to start waits for this group rather than leave its callers to the next one.
	c.s.dur.groupStart()
	g.syncWaits = true
	w := c.s.newTxWriter(g.ctx, tx, c.s.stmts, &lineCounts{}) // carries each run's last seq from call to call
	w.group = g
	g.w = w
	bytes := 0
	for i, r := range g.taken {
		if g.stopBuilding.Load() {
			n = i // stopped: what has run commits now, the rest in the next group
			break
		}
		if !r.state.CompareAndSwap(reqTaken, reqRunning) {
			// Withdrawn while the group waited (for the writer, or for the calls before it). No one
			// reads this result: its caller returned its own context's error (see deadlinePassed).
			g.results[i] = result{err: errCallerGone}
			continue
		}
		if r.callerGone.Load() {
			g.results[i] = result{err: errCallerGone}
			continue
		}
		g.building = i
		seq, size, err := c.s.enqueue(r.ctx, w, r.runID, r.onceKey, r.build)
		if err == errGroupTakenOver {
			return 0, false
		}
		if err == errNotBuilt {
			r.state.Store(reqTaken) // not run: it goes to the next group
			n = i
			break
		}
		if up, ok := err.(userPanic); ok {
			g.results[i] = result{panicked: true, panicVal: up.val}
			continue
		}
		g.results[i] = result{seq: seq, err: err}
		if err != nil {
			// A failed statement undoes itself, unless SQLite ended the whole transaction.
			if lost := c.s.txLost(); lost != nil {
				n = i + 1
				c.s.rollback(tx)
				g.failAll(n, lost)
				g.finish()
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
			g.finish()
		}
	}()
	// The group's lines, one upsert per run, whatever its calls' deadlines: like the COMMIT after it,
	// this is no single caller's, and the calls that ran are to commit. A builder given up on inserted
	// nothing, and its goroutine touches the writer no more (see commitPastStuckBuilder).
	if err := g.w.addCounts(context.WithoutCancel(g.ctx)); err != nil {
		s.rollback(g.tx)
		g.finish()
		g.failAll(n, err)
		return
	}
	faultpoint.Hit(faultpoint.BeforeCommit)
	ticket, err := s.commitTx(g.tx, durable, n)
	g.finish()
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
