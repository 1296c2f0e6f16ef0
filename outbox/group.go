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

	"github.com/textmachine/outbox/db"
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
// Each call stays isolated without a SAVEPOINT: it writes at most one statement (its INSERT; the
// once-key lookup only reads), and a builder that fails, panics or declines writes nothing. A
// statement that fails undoes only itself (SQLite's statement journal), so a call whose insert fails
// on a constraint, or whose run has no seq left, fails alone and the group commits the others. Only
// when SQLite has left the transaction (an interrupted write, a full disk, an I/O error; see txLost)
// do the calls that ran in it fail, since none of them is then stored (the calls not yet run go on in
// the next group); a failed COMMIT fails the whole group. The last seq
// of each run is carried from call to call within the group instead of being read again.

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
	ticket   uint64 // the group's commit, which the caller waits to be durable; 0 if it failed
	err      error
	panicked bool
	panicVal any
}

type committer struct {
	s       *Store
	queue   chan *request
	stop    chan struct{}
	stopped chan struct{}
	// Prepared once on the writer connection; database/sql reuses them inside each transaction. The
	// last two are the relay's progress record.
	lastSeq, insert, insertLine, onceFound, progressSet, markProjected *sql.Stmt
}

func newCommitter(ctx context.Context, s *Store) (*committer, error) {
	c := &committer{s: s, queue: make(chan *request, maxGroup), stop: make(chan struct{}), stopped: make(chan struct{})}
	var err error
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&c.lastSeq, db.EventLastSeq}, {&c.insert, db.EventInsert}, {&c.insertLine, db.EventLineInsert}, {&c.onceFound, db.EventsOnceKeyExists},
		{&c.progressSet, db.ProgressSet}, {&c.markProjected, db.EventMarkProjected},
	} {
		if *p.stmt, err = s.w.PrepareContext(ctx, p.sql); err != nil {
			c.closeStmts()
			return nil, fmt.Errorf("outbox: prepare: %w", err)
		}
	}
	go c.run()
	return c, nil
}

func (c *committer) closeStmts() {
	for _, st := range []*sql.Stmt{c.lastSeq, c.insert, c.insertLine, c.onceFound, c.progressSet, c.markProjected} {
		if st != nil {
			st.Close()
		}
	}
}

// close stops the committer. The store calls it once no operation is in flight, so the queue is empty.
func (c *committer) close() {
	close(c.stop)
	<-c.stopped
	c.closeStmts()
}

func (c *committer) run() {
	defer close(c.stopped)
	var carry []*request // calls taken but left over by a group that reached maxGroupBytes
	for {
		group := carry
		if len(group) == 0 {
			select {
			case first := <-c.queue:
				group = []*request{first}
			case <-c.stop:
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
			return 0, fmt.Errorf("outbox: waited for the writer past the operation timeout (WithOpTimeout): %w", context.DeadlineExceeded)
		}
		res = <-r.done
	}
	if res.panicked {
		panic(res.panicVal)
	}
	if res.err == nil && res.ticket != 0 {
		// A call that stored nothing waits too: a once key found already queued may belong to a
		// commit that is not durable yet.
		if err := s.dur.wait(res.ticket); err != nil {
			// Committed: the seq goes back with the error, so that a caller does not retry an
			// event that is stored.
			return res.seq, fmt.Errorf("outbox: commit: %w", err)
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

// write writes the first calls of taken into one transaction and commits it, filling their results;
// it returns how many calls the group holds. A panic inside the driver or SQLite fails them all with
// ErrStoreBroken, on this goroutine, which no caller owns.
func (c *committer) write(taken []*request, results []result) (n int) {
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
	// connection (see txOn). The statements take the operation timeout.
	tx, err := c.s.w.BeginTx(context.Background(), nil)
	if err != nil {
		failAll(fmt.Errorf("outbox: begin: %w", mapErr(ctx, err)))
		return n
	}
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
	last := map[string]int64{} // each run's last seq within this group
	bytes := 0
	lastSeq, onceFound := tx.StmtContext(ctx, c.lastSeq), tx.StmtContext(ctx, c.onceFound)
	insert := c.inserts(ctx, tx)
	for i, r := range taken {
		if !r.state.CompareAndSwap(reqTaken, reqRunning) {
			// Withdrawn while the group waited (for the writer, or for the calls before it).
			results[i] = result{err: context.Canceled}
			continue
		}
		var fatal error
		var size int
		results[i], size, fatal = c.one(ctx, r, last, lastSeq, insert, onceFound)
		if fatal == nil && results[i].err != nil {
			// A failed statement undoes itself, unless SQLite ended the whole transaction.
			fatal = c.s.txLost()
		}
		if fatal != nil {
			n = i + 1
			c.s.rollback(tx)
			failAll(fatal)
			return n
		}
		if bytes += size; bytes >= maxGroupBytes {
			n = i + 1
			break
		}
	}
	faultpoint.Hit(faultpoint.BeforeCommit)
	ticket := c.s.dur.issue()
	err = c.s.commitGroup(tx, ticket, n)
	endGroup()
	if err != nil {
		failAll(fmt.Errorf("outbox: commit: %w", mapErr(ctx, err)))
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

// one runs one call inside the group's transaction. Its own failures (context, builder, line, a
// constraint, an exhausted run) are its result; a failed read is fatal to the group.
// inserts are the committer's prepared inserts, on tx.
func (c *committer) inserts(ctx context.Context, tx *sql.Tx) inserts {
	return inserts{
		event: prepared{db.EventInsert, tx.StmtContext(ctx, c.insert)},
		line:  prepared{db.EventLineInsert, tx.StmtContext(ctx, c.insertLine)},
	}
}

func (c *committer) one(ctx context.Context, r *request, last map[string]int64, lastSeq *sql.Stmt, insert inserts, onceFound *sql.Stmt) (res result, size int, fatal error) {
	res, fatal = c.insertOne(ctx, r, last, lastSeq, insert, onceFound)
	if res.err == nil && res.seq > 0 {
		size = res.size
	}
	return res, size, fatal
}

func (c *committer) insertOne(ctx context.Context, r *request, last map[string]int64, lastSeq *sql.Stmt, insert inserts, onceFound *sql.Stmt) (res result, fatal error) {
	if err := r.ctx.Err(); err != nil {
		return result{err: err}, nil
	}
	if r.onceKey != "" {
		var found int64
		if err := onceFound.QueryRowContext(ctx, r.onceKey).Scan(&found); err != nil {
			return result{}, fmt.Errorf("outbox: look up once key: %w", mapErr(ctx, err))
		}
		if found != 0 {
			return result{}, nil
		}
	}
	prev, ok := last[r.runID]
	if !ok {
		if err := lastSeq.QueryRowContext(ctx, r.runID).Scan(&prev); err != nil {
			return result{}, fmt.Errorf("outbox: last seq of run %q: %w", r.runID, mapErr(ctx, err))
		}
		last[r.runID] = prev
	}
	seq, err := nextSeq(r.runID, prev)
	if err != nil {
		return result{err: err}, nil
	}
	line, panicked, val, err := callBuild(r.build, seq)
	switch {
	case panicked:
		return result{panicked: true, panicVal: val}, nil
	case err != nil:
		return result{err: fmt.Errorf("outbox: build line %d of run %q: %w", seq, r.runID, err)}, nil
	case line == nil:
		return result{}, nil
	case r.ctx.Err() != nil:
		// Cancelled while its line was rendered: it stores nothing, as on a transaction of its own.
		return result{err: r.ctx.Err()}, nil
	}
	if err := c.s.checkLine(line); err != nil {
		return result{err: fmt.Errorf("outbox: line %d of run %q: %w", seq, r.runID, err)}, nil
	}
	if err := c.s.insertEvent(ctx, insert, db.EventInsertParams{
		EngineRunID: r.runID, Seq: seq, Line: line, AnnounceKey: r.onceKey, EnqueuedAt: time.Now().UnixMilli(),
	}); err != nil {
		return result{err: fmt.Errorf("outbox: insert line %d of run %q: %w", seq, r.runID, mapErr(ctx, err))}, nil
	}
	last[r.runID] = seq
	c.s.markLive(r.runID)
	return result{seq: seq, size: len(line)}, nil
}

// userPanic carries a panic of the caller's own code (a builder, a WriteTx function) through the
// store's recovery, which turns any other panic, one inside the driver or SQLite, into an error.
type userPanic struct{ val any }

// callUser runs a builder on the caller's goroutine, marking its panic as the caller's.
func callUser(build EventBuilder, seq int64) ([]byte, error) {
	line, panicked, val, err := callBuild(build, seq)
	if panicked {
		panic(userPanic{val})
	}
	return line, err
}

// callBuild runs a builder on the committer's goroutine, turning a panic into a value the caller's
// goroutine re-raises.
func callBuild(build EventBuilder, seq int64) (line []byte, panicked bool, val any, err error) {
	defer func() {
		if v := recover(); v != nil {
			panicked, val = true, v
		}
	}()
	line, err = build(seq)
	return line, false, nil, err
}

// EnqueueEvents enqueues a batch of runID's events in one transaction, all or nothing: each builder
// gets the next number in order; a declining builder takes none, and its entry in seqs is 0. An error
// from any builder (or a line it renders that is invalid) stores none of them.
func (s *Store) EnqueueEvents(ctx context.Context, runID string, builds []EventBuilder) (seqs []int64, err error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	for i, b := range builds {
		if b == nil {
			return nil, fmt.Errorf("outbox: EnqueueEvents: builder %d is nil", i)
		}
	}
	seqs = make([]int64, len(builds))
	if len(builds) == 0 {
		return seqs, nil
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		last, err := s.q.EventLastSeq(ctx, tx, runID)
		if err != nil {
			return fmt.Errorf("outbox: last seq of run %q: %w", runID, mapErr(ctx, err))
		}
		insert := s.group.inserts(ctx, tx)
		now := time.Now().UnixMilli()
		for i, build := range builds {
			next, err := nextSeq(runID, last)
			if err != nil {
				return err
			}
			line, err := callUser(build, next)
			switch {
			case err != nil:
				return fmt.Errorf("outbox: build line %d of run %q: %w", next, runID, err)
			case line == nil:
				seqs[i] = 0
				continue
			}
			if err := s.checkLine(line); err != nil {
				return fmt.Errorf("outbox: line %d of run %q: %w", next, runID, err)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := s.insertEvent(ctx, insert, db.EventInsertParams{
				EngineRunID: runID, Seq: next, Line: line, EnqueuedAt: now,
			}); err != nil {
				return fmt.Errorf("outbox: insert line %d of run %q: %w", next, runID, mapErr(ctx, err))
			}
			seqs[i] = next
			last = next
		}
		s.markLive(runID)
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return nil, err
	}
	return seqs, err
}
