// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"fmt"
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
// so that no group carries two large lines. A small call that arrives while a producer of 16 MiB lines
// writes one waits for the rest of that write and, at worst, for the next large line queued ahead of
// it: about two large writes at p99 (docs/BENCHMARKS.md).
const maxGroupBytes = 1 << 20

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
	done    chan result
	callerWatch
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
	stuckBuilders
}

func newCommitter(s *Store) *committer {
	c := &committer{s: s, queue: make(chan *request, maxGroup), stop: make(chan struct{}), stopped: make(chan struct{})}
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
// group over (see takeover.go), which then runs the loop in its place.
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
		var owned bool
		if carry, owned = c.commit(group); !owned {
			return
		}
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
		res = s.group.deadlinePassed(r, ctx.Err())
	case <-timeout:
		res = s.group.deadlinePassed(r, fmt.Errorf("waited for the writer past the operation timeout (WithOpTimeout): %w", context.DeadlineExceeded))
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
