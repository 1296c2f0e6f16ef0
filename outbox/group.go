package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
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
	g       int64 // the goroutine running the groups: builders run on it
}

func newCommitter(s *Store) *committer {
	c := &committer{s: s, queue: make(chan *request, maxGroup), stop: make(chan struct{}), stopped: make(chan struct{})}
	go c.run()
	return c
}

// close stops the committer. The store calls it once no operation is in flight, so the queue is empty.
func (c *committer) close() {
	close(c.stop)
	<-c.stopped
}

func (c *committer) run() {
	c.g = goid()
	stopped := false
	defer func() {
		if !stopped {
			// A builder called runtime.Goexit, which no recover stops: its group has been failed
			// (see write), and a new goroutine takes the queue from here.
			go c.run()
			return
		}
		close(c.stopped)
	}()
	var carry []*request // calls taken but left over by a group that reached maxGroupBytes
	for {
		group := carry
		if len(group) == 0 {
			select {
			case first := <-c.queue:
				group = []*request{first}
			case <-c.stop:
				stopped = true
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
		carry = c.commit(group)
	}
}

// timers are the stopped timers of submit's operation timeout.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// submit queues one call and waits for the commit of its group.
func (s *Store) submit(ctx context.Context, runID, onceKey string, build EventBuilder) (int64, error) {
	if err := s.enter(true); err != nil {
		return 0, err
	}
	defer s.exit()
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
		if r.state.CompareAndSwap(reqQueued, reqWithdrawn) || r.state.CompareAndSwap(reqTaken, reqWithdrawn) {
			return 0, ctx.Err()
		}
		// Running: the outcome, durable or not, is on its way and must be reported as it is.
		res = <-r.done
	case <-timeout:
		if r.state.CompareAndSwap(reqQueued, reqWithdrawn) || r.state.CompareAndSwap(reqTaken, reqWithdrawn) {
			return 0, fmt.Errorf("waited for the writer past the operation timeout (WithOpTimeout): %w", context.DeadlineExceeded)
		}
		res = <-r.done
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

// commit runs the calls of group that are still wanted in one transaction and delivers their results.
// It returns the calls it took but left for the next group, once the group holds maxGroupBytes of
// lines: a producer of large lines then delays the others by about one large write, not by a group
// of them.
func (c *committer) commit(group []*request) (carry []*request) {
	taken := group[:0]
	for _, r := range group {
		// A call carried from the last group is taken already; a new one may have been withdrawn.
		if r.state.Load() == reqTaken || r.state.CompareAndSwap(reqQueued, reqTaken) {
			taken = append(taken, r)
		}
	}
	if len(taken) == 0 {
		return nil
	}
	results := make([]result, len(taken))
	n := c.write(taken, results)
	for i, r := range taken[:n] {
		r.done <- results[i]
	}
	if n == len(taken) {
		return nil
	}
	return slices.Clone(taken[n:])
}

// errBuilderExited fails the calls of a group in which a builder called runtime.Goexit.
var errBuilderExited = errors.New("outbox: a builder called runtime.Goexit; its group was rolled back")

// write writes the first calls of taken into one transaction and commits it, filling their results;
// it returns how many calls the group holds.
//
// A builder runs on this goroutine, so one that calls runtime.Goexit (t.FailNow in a test) ends it
// half-way through a group, past any recover. Then the group's transaction is rolled back and every
// call taken gets errBuilderExited here, since the caller's delivery will not run, and run starts a
// new goroutine: no caller waits for ever, and the writer connection is not left in a transaction.
func (c *committer) write(taken []*request, results []result) (n int) {
	var tx *sql.Tx // the group's transaction while it is open
	returned := false
	defer func() {
		if returned {
			return
		}
		if tx != nil {
			c.s.rollback(tx)
		}
		for i, r := range taken {
			if results[i].err == nil && !results[i].panicked {
				results[i] = result{err: errBuilderExited}
			}
			r.done <- results[i]
		}
	}()
	n = c.writeGroup(taken, results, &tx)
	returned = true
	return n
}

// writeGroup is write's body; it keeps the group's transaction in *open while it is open. A panic
// inside the driver or SQLite fails the calls with ErrStoreBroken, on this goroutine, which no caller
// owns.
func (c *committer) writeGroup(taken []*request, results []result, open **sql.Tx) (n int) {
	n = len(taken)
	failAll := func(err error) {
		for i := range results[:n] {
			if results[i].err == nil && !results[i].panicked {
				results[i] = result{err: err}
			}
		}
	}
	defer func() {
		if v := recover(); v != nil {
			failAll(c.s.breakDown(v))
		}
	}()
	ctx, cancel := c.s.opContext(context.Background())
	defer cancel()
	// The transaction takes no context: its end would make database/sql close the writer
	// connection (see Store.write). The statements take the operation timeout.
	tx, err := c.s.w.BeginTx(context.Background(), nil)
	if err != nil {
		failAll(fmt.Errorf("begin: %w", mapErr(ctx, err)))
		return n
	}
	*open = tx
	// A builder runs on this goroutine: one that calls the store is told so (ErrCallInsideTx).
	c.s.writerG.Store(c.g)
	defer c.s.writerG.CompareAndSwap(c.g, 0) // the writer may already be another's
	// A sync about to start waits for this group rather than leave its callers to the next one.
	c.s.dur.groupStart()
	ended := false
	endGroup := func() {
		if !ended {
			ended = true
			c.s.dur.groupEnd()
		}
	}
	defer endGroup()
	w := c.s.newTxWriter(ctx, tx, c.s.stmts) // carries each run's last seq from call to call
	bytes := 0
	for i, r := range taken {
		if !r.state.CompareAndSwap(reqTaken, reqRunning) {
			// Withdrawn while the group waited (for the writer, or for the calls before it).
			results[i] = result{err: context.Canceled}
			continue
		}
		seq, size, err := c.s.enqueue(r.ctx, w, r.runID, r.onceKey, r.build)
		if up, ok := err.(userPanic); ok {
			results[i] = result{panicked: true, panicVal: up.val}
			continue
		}
		results[i] = result{seq: seq, err: err}
		if err != nil {
			// A failed statement undoes itself, unless SQLite ended the whole transaction.
			if lost := c.s.txLost(); lost != nil {
				n = i + 1
				c.s.rollback(tx)
				*open = nil
				failAll(lost)
				return n
			}
			continue
		}
		if bytes += size; bytes >= maxGroupBytes {
			n = i + 1
			break
		}
	}
	faultpoint.Hit(faultpoint.BeforeCommit)
	ticket, err := c.s.commitTx(tx, durable, n)
	*open = nil
	endGroup()
	if err != nil {
		failAll(fmt.Errorf("commit: %w", mapErr(ctx, err)))
		return n
	}
	faultpoint.Hit(faultpoint.AfterCommit)
	c.s.signalCommit()
	// The callers wait for the sync themselves, so the next group begins while the disk works.
	for i := range results[:n] {
		results[i].ticket = ticket
	}
	return n
}
