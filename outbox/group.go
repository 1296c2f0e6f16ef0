// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit: at DurabilityFull each transaction costs one fdatasync of the WAL, so one event per
// transaction is capped by the disk. EnqueueEvent and EnqueueOnce hand their work to one committer
// goroutine, which runs every call that is waiting in one transaction. The committer does not wait
// for the disk: it hands each caller its commit's ticket and moves on to the next group, and the
// callers wait for the WAL sync that covers them (see durability), which also covers the groups
// committed while the one before it ran. Callers released by one sync come back at about the same
// time, so the committer waits a moment (gatherWait) for as many as the last sync released before it
// begins a group: one group instead of several, each paying for BEGIN and COMMIT.
//
// Each call stays isolated without a SAVEPOINT: it writes one statement, its INSERT (a large line is a
// second, deleted again if the row's insert fails; the once-key lookup only reads), and a builder that
// fails, panics or declines writes nothing. A statement that fails undoes only itself (SQLite's
// statement journal), so a call whose insert fails on a constraint, or whose run has no seq left,
// fails alone and the group commits the others. Only when SQLite has left the transaction (an
// interrupted write, a full disk, an I/O error; see txLost) do the calls that ran in it fail, since
// none of them is then stored (the calls not yet run go on in the next group); a failed COMMIT fails
// the whole group. The group's txWriter carries the last seq of each run from call to call instead of
// reading it again.

// gatherWait bounds how long the committer waits for the callers of the last sync to come back: long
// enough for a released cohort to return (they arrive within some tens of microseconds here), short
// enough that callers who went off to other work cost the one that came back little.
const gatherWait = 100 * time.Microsecond

// maxGroup bounds a group, so one commit's latency stays bounded under any load.
const maxGroup = 512

// maxGroupBytes bounds a group's lines in bytes as well: a group ends after the line that reaches it,
// so a producer of large lines delays the calls grouped with it by about one large write.
const maxGroupBytes = 1 << 20

// A large write (a line of maxGroupBytes or more) takes some hundred milliseconds for a 16 MiB line
// (its pages written into the WAL, then synced), and a small call that arrives meanwhile waits for the
// rest of it. It must not wait for the next large line too: so the committer learns which runs write large lines (a run whose last
// line was large), puts their calls behind the small calls waiting in its queue (see order), writes a
// large line in a group of its own, and before that group makes the commits already written durable,
// so that their sync does not carry the large line's pages as well. A run's calls have no order among
// themselves until one returns, so reordering concurrent calls changes no guarantee. A large call is
// put back at most once in a row: it goes first in the next group, whatever has arrived since.
//
// largeGatherWait bounds how long a large call that would begin a group waits for the small callers
// released with it (see gatherBeforeLarge): a millisecond, next to a large write's hundred or more.
const largeGatherWait = time.Millisecond

// maxLargeRuns bounds how many runs the committer remembers as writers of large lines; past it, a
// further run is treated as small until one of the remembered ones writes a small line.
const maxLargeRuns = 64

// Request states: a caller whose context ends may withdraw its request until the committer takes it.
const (
	reqQueued  int32 = iota
	reqTaken         // in a group; the caller may still withdraw it until the committer runs it
	reqRunning       // the committer is running it: its outcome is on its way
	reqWithdrawn
)

type request struct {
	ctx     context.Context
	runID   string
	onceKey string
	build   EventBuilder
	state   atomic.Int32
	// late is set once the caller's own deadline has passed: a call that has not run yet is then
	// not run (errLate), and group is the group it runs in, which the caller hurries (see late).
	late  atomic.Bool
	group atomic.Pointer[groupRun]
	done  chan result
	// deferred is set when the committer put the call back behind the small calls waiting, once:
	// it goes first in the next group. Only the committer touches it.
	deferred bool
}

type result struct {
	seq      int64
	size     int    // the line's length, for the group's byte bound
	ticket   ticket // the group's commit, which the caller waits to be durable; zero if it failed
	err      error
	panicked bool
	panicVal any
}

type committer struct {
	s       *Store
	queue   chan *request
	stop    chan struct{}
	stopped chan struct{}
	// current is the group being written, for a caller whose deadline passes and for Close.
	current atomic.Pointer[groupRun]
	// givenUp is set once Close has waited its time: no builder runs any more, and the calls still
	// queued fail with ErrClosed.
	givenUp atomic.Bool

	mu    sync.Mutex
	stuck []*groupRun // groups whose builder was given up on, until it returns (for Close's error)

	// large holds the runs whose last line was large (see maxLargeRuns). Only the goroutine that runs
	// the committer's loop touches it; the loop changes hands only through an atomic phase or a go
	// statement (see groupRun.expedite and committer.write), which orders the accesses.
	large map[string]struct{}
	// largeWait is largeGatherWait, which a test may lengthen before the first call.
	largeWait time.Duration
}

func newCommitter(s *Store) *committer {
	c := &committer{s: s, queue: make(chan *request, maxGroup), stop: make(chan struct{}), stopped: make(chan struct{}), largeWait: largeGatherWait}
	go c.run(nil)
	return c
}

// close stops the committer. The store calls it once no operation is in flight, so the queue is empty.
func (c *committer) close() {
	close(c.stop)
	<-c.stopped
}

// run is the committer's loop, from the calls carry left over. Exactly one goroutine runs it at a
// time: it returns when the store stops it, and when a builder overran and another goroutine took the
// group over (see groupRun.expedite), which then runs the loop in its place.
func (c *committer) run(carry []*request) {
	for {
		group := carry
		if len(group) == 0 {
			select {
			case first := <-c.queue:
				group = []*request{first}
			case <-c.stop:
				close(c.stopped)
				return
			}
		}
		// Everything already waiting joins: a lone caller waits for nobody.
	gather:
		for len(group) < maxGroup {
			select {
			case r := <-c.queue:
				group = append(group, r)
			default:
				break gather
			}
		}
		// The callers the last sync released come back together; waiting a moment for them makes
		// one group of what would be several, each paying BEGIN and COMMIT. A lone caller waits for
		// nobody, as the last sync released only itself.
		if want := int(c.s.dur.released.Load()); len(group) < want {
			timer := time.NewTimer(gatherWait)
		linger:
			for len(group) < min(want, maxGroup) {
				select {
				case r := <-c.queue:
					group = append(group, r)
				case <-timer.C:
					break linger
				}
			}
			timer.Stop()
		}
		c.order(group)
		if len(c.large) > 0 && !group[0].deferred && c.isLarge(group[0].runID) {
			group = c.gatherBeforeLarge(group)
		}
		var owned bool
		if carry, owned = c.commit(group); !owned {
			return
		}
	}
}

// order puts the calls of runs that write large lines after the other calls of group, keeping the
// order of arrival within each kind; a call already put back once goes first.
func (c *committer) order(group []*request) {
	if len(c.large) == 0 {
		return // a call put back once is at the head already: the group begins with the carried calls
	}
	rank := func(r *request) int {
		switch {
		case r.deferred:
			return 0
		case c.isLarge(r.runID):
			return 2
		}
		return 1
	}
	slices.SortStableFunc(group, func(a, b *request) int { return cmp.Compare(rank(a), rank(b)) })
}

// gatherBeforeLarge is run's wait for the callers of the last sync when a large call would begin the
// group: the large producer's caller and the small callers that its write's sync released come back
// together, and a large call that reached the queue first would otherwise make the others wait for
// its whole write. It waits at most largeGatherWait, and only for as many as the sync released.
func (c *committer) gatherBeforeLarge(group []*request) []*request {
	want := min(int(c.s.dur.released.Load()), maxGroup)
	if len(group) >= want {
		return group
	}
	timer := time.NewTimer(c.largeWait)
	defer timer.Stop()
	for len(group) < want {
		select {
		case r := <-c.queue:
			group = append(group, r)
		case <-timer.C:
			c.order(group)
			return group
		}
	}
	c.order(group)
	return group
}

// isLarge reports whether runID's last line was a large one.
func (c *committer) isLarge(runID string) bool {
	_, ok := c.large[runID]
	return ok
}

// noteLine records the size of the line a call of runID has just stored.
func (c *committer) noteLine(runID string, size int) {
	switch {
	case size < maxGroupBytes:
		if len(c.large) > 0 {
			delete(c.large, runID)
		}
	case len(c.large) < maxLargeRuns:
		if c.large == nil {
			c.large = map[string]struct{}{}
		}
		c.large[runID] = struct{}{}
	}
}

// timers are the stopped timers of submit's operation timeout.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// submit queues one call and waits for the commit of its group.
func (s *Store) submit(ctx context.Context, runID, onceKey string, build EventBuilder) (_ int64, err error) {
	if err := s.enter(true); err != nil {
		return 0, err
	}
	defer s.exit()
	defer func() { err = s.named(err) }()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.checkNotInsideTx(); err != nil {
		return 0, err
	}
	// The operation timeout bounds the wait of a caller whose context has no deadline. It is a
	// pooled timer, not a context of its own: a context per call cost 16 producers about a tenth of
	// their throughput (BenchmarkProducersRatio).
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && s.cfg.opTimeout > 0 {
		t := timers.Get().(*time.Timer)
		t.Reset(s.cfg.opTimeout)
		defer func() { t.Stop(); timers.Put(t) }()
		timeout = t.C
	}
	r := &request{ctx: ctx, runID: runID, onceKey: onceKey, build: build, done: make(chan result, 1)}
	select {
	case s.group.queue <- r:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timeout:
		return 0, context.DeadlineExceeded
	}
	var res result
	select {
	case res = <-r.done:
	case <-ctx.Done():
		res = s.group.late(r, ctx.Err())
	case <-timeout:
		res = s.group.late(r, fmt.Errorf("waited for the writer past the operation timeout (WithOpTimeout): %w", context.DeadlineExceeded))
	}
	if res.panicked {
		panic(res.panicVal)
	}
	if res.err == nil {
		// A call that stored nothing waits too: a once key found already queued may belong to a
		// commit that is not durable yet.
		if err := res.ticket.wait(); err != nil {
			// Committed: the seq goes back with the error, so that a caller does not retry an
			// event that is stored.
			return res.seq, fmt.Errorf("commit: %w", err)
		}
	}
	return res.seq, res.err
}

// late is what a caller whose deadline (err) has passed is told. A call not yet run is withdrawn and
// never runs. A call in a group, run or about to be, cannot be taken out of it (a later call of the
// same run may already number on from it), so the caller hurries the group instead: the committer
// runs no further builder in it and commits what has run, and a builder running now, whoever's it is,
// is given up on (see groupRun.expedite). Either way the outcome comes back within about a statement
// and a commit, whatever the builders do, and it is the truth: committed, or not stored.
func (c *committer) late(r *request, err error) result {
	r.late.Store(true)
	if r.state.CompareAndSwap(reqQueued, reqWithdrawn) || r.state.CompareAndSwap(reqTaken, reqWithdrawn) {
		return result{err: err}
	}
	if g := r.group.Load(); g != nil {
		g.expedite(r)
	}
	res := <-r.done
	switch {
	case res.err == errLate:
		res.err = err
	case errors.Is(res.err, ErrBuilderStuck) && !errors.Is(res.err, err):
		res.err = fmt.Errorf("%w (%w)", res.err, err)
	}
	return res
}

// errLate fails a call that had not run when its caller's deadline passed; the caller returns its own
// error instead.
var errLate = errors.New("outbox: the caller's deadline passed before its call ran")
