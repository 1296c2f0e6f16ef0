package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// Sink receives projected lines. Append gets a batch of one run's lines, runID's, in seq order; it
// must return nil only once every line of the batch is durable, and must never leave part of a batch
// behind. On error the relay sends the same lines again later, byte for byte, so a sink that cannot
// tell whether a failed batch landed may keep it and accept the re-delivery as a duplicate.
//
// The store keeps lines opaque; the sink is where a line meets its key. A sink refuses, with an error
// wrapping ErrSinkRefused, a line whose own engine_run_id is not runID or whose own seq is not its
// EventLine.Seq, so that a builder that writes the wrong key cannot make an event vanish as a
// "duplicate" of another. journal.File is the file sink.
type Sink interface {
	Append(ctx context.Context, runID string, lines []EventLine) error
}

// ErrSinkRefused is returned when a sink refuses a batch in a way no retry can cure: the destination
// already holds another line under the same key, or lacks the line before the batch's first. A sink
// wraps it in its error; the relay then stops projecting and returns the error instead of backing off
// and trying again.
var ErrSinkRefused = errors.New("outbox: the sink refuses the batch")

// ErrRowsMissing is returned when a run's stored lines are not contiguous after its projected
// position, so that projecting them would put a gap in the journal. It happens only when rows were
// deleted outside the protocol (ForgetEvents without Recover, or by hand).
var ErrRowsMissing = errors.New("outbox: stored lines are not contiguous")

// Relay defaults.
const (
	DefaultBatchSize     = 256
	DefaultBatchBytes    = 4 << 20
	DefaultMinBackoff    = 10 * time.Millisecond
	DefaultMaxBackoff    = 5 * time.Second
	DefaultFlushAttempts = 5
	DefaultPollInterval  = time.Second
)

type relayConfig struct {
	batch         int
	batchBytes    int
	minBackoff    time.Duration
	maxBackoff    time.Duration
	flushAttempts int
	poll          time.Duration
	log           *slog.Logger
	onProjected   func(runID string, lines int, last int64)
	forget        bool
}

// RelayOption configures NewRelay. An invalid value makes NewRelay fail.
type RelayOption func(*relayConfig) error

// BatchSizer is a Sink that says how many lines a batch should hold for it: a broker that stores a
// batch atomically is faster with larger ones than a file that syncs each. NewRelay takes that size
// unless WithBatchSize is given.
type BatchSizer interface {
	BatchSize() int
}

// WithBatchSize sets how many lines a relay reads and appends at a time, at most. The default is the
// sink's BatchSize when it is a BatchSizer, otherwise DefaultBatchSize (256). WithBatchBytes bounds a
// batch too.
func WithBatchSize(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return fmt.Errorf("outbox: relay batch size %d, need at least 1", n)
		}
		c.batch = n
		return nil
	}
}

// WithBatchBytes bounds the bytes of lines a relay holds: a batch ends before the line that would
// take it past n bytes, and the batches read ahead while one is appended share the same n with it. A
// batch always holds at least one line, so a line longer than n is read and appended alone. So a
// relay holds at most n bytes of lines plus one line, whatever the lines' size; a sink may copy the
// batch it is given (journal.File does, once). The default is DefaultBatchBytes (4 MiB).
func WithBatchBytes(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return fmt.Errorf("outbox: relay batch bytes %d, need at least 1", n)
		}
		c.batchBytes = n
		return nil
	}
}

// WithBackoff sets the wait after a failed batch: it starts at min and doubles up to max. The
// defaults are 10ms and 5s.
func WithBackoff(min, max time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if min <= 0 || max < min {
			return fmt.Errorf("outbox: relay backoff %v..%v, need 0 < min <= max", min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// WithFlushAttempts sets how many times Flush and Recover try a failing batch before returning the
// sink's error. The default is 5. Run never gives up.
func WithFlushAttempts(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return fmt.Errorf("outbox: relay flush attempts %d, need at least 1", n)
		}
		c.flushAttempts = n
		return nil
	}
}

// WithPollInterval sets how often Run looks for lines without a signal from the store: commits on a
// transaction the store did not begin do not signal it. The default is 1s.
func WithPollInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d <= 0 {
			return fmt.Errorf("outbox: relay poll interval %v, need > 0", d)
		}
		c.poll = d
		return nil
	}
}

// WithOnProjected sets a function called after each batch the relay places and records: the run,
// the batch's number of lines and its last seq. It runs on the relay's goroutine and must not block;
// a progress display or a metrics counter is its use.
func WithOnProjected(fn func(runID string, lines int, last int64)) RelayOption {
	return func(c *relayConfig) error {
		c.onProjected = fn
		return nil
	}
}

// WithForgetProjected makes the relay forget the rows it has projected as it goes: each batch's record
// also deletes, in the same transaction, the batch's rows that hold no once key. The ledger is kept
// (rows whose key it holds stay, as they must for the life of the book), and so is the run's highest
// seq, so no number is reused. A process that runs for months then keeps in its book only what is not
// yet projected, and the ledger, instead of every event since it started.
//
// The default (off) keeps a live run's projected rows until the next start, when Recover forgets
// them: `outbox pending --all` can show them until then, and a run all of whose rows are forgotten
// is no longer listed by Runs, AllRuns and `outbox stats` (its progress is kept: Projected and
// EventsUsed still know it).
func WithForgetProjected(on bool) RelayOption {
	return func(c *relayConfig) error {
		c.forget = on
		return nil
	}
}

// WithRelayLogger sets the relay's logger; by default it uses the store's. It logs once per change of
// state (the sink failing, the sink recovered), not once per attempt.
func WithRelayLogger(l *slog.Logger) RelayOption {
	return func(c *relayConfig) error {
		if l == nil {
			return errors.New("outbox: nil relay logger")
		}
		c.log = l
		return nil
	}
}

// Relay projects a store's lines to a sink: in seq order per run, in bounded batches, recording after
// each batch how far it got and moving the batch's once keys into the ledger. A line is recorded only
// after the sink has it, so a crash re-sends at most the batches in flight, byte for byte: the one
// being appended, and the one before it, whose record runs beside that append. It never skips one.
//
// A relay serves one run, its own (runID), and Recover serves the runs of earlier processes. Its
// methods are safe for concurrent use; batches are projected one at a time. Relays of one Store that
// project the same run take turns, so none appends a line another has appended; a relay waiting for
// its turn gives up when its context ends.
type Relay struct {
	s     *Store
	sink  Sink
	runID string
	cfg   relayConfig

	mu      sync.Mutex // one batch at a time; guards failing
	failing error      // the error of the last failed batch, until a batch succeeds
}

// NewRelay returns a relay from s to sink for runID. It fails, and returns no relay, when s or sink is
// nil, s is read-only (ErrReadOnly: it could append but never record), runID is not a valid run id
// (ErrInvalidRunID), or an option is given an invalid value.
func NewRelay(s *Store, sink Sink, runID string, opts ...RelayOption) (*Relay, error) {
	switch {
	case s == nil:
		return nil, errors.New("outbox: relay with a nil store")
	case sink == nil:
		return nil, errors.New("outbox: relay with a nil sink")
	case s.readOnly:
		return nil, fmt.Errorf("relay on a read-only store: %w", ErrReadOnly)
	}
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	r := &Relay{s: s, sink: sink, runID: runID, cfg: relayConfig{
		batch:         DefaultBatchSize,
		batchBytes:    DefaultBatchBytes,
		minBackoff:    DefaultMinBackoff,
		maxBackoff:    DefaultMaxBackoff,
		flushAttempts: DefaultFlushAttempts,
		poll:          DefaultPollInterval,
		log:           s.log,
	}}
	if b, ok := sink.(BatchSizer); ok && b.BatchSize() > 0 {
		r.cfg.batch = b.BatchSize()
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&r.cfg); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// sinkError marks an error as the sink's, which is worth retrying, unlike the store's own failures.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return "sink: " + e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

type fetched struct {
	lines  []EventLine
	toMark []int64
	err    error
}

// readAhead is how many batches a relay reads ahead of the one it is appending. The read is CPU work
// and the append mostly waits for the disk, so they overlap; two batches of slack keep a read that
// the scheduler delays off the critical path.
const readAhead = 2

// prefetch reads a run's batches in order on a goroutine of its own, up to readAhead ahead of the
// relay, starting after seq after, and stops at an empty batch, an error, or target.
//
// The batch being appended and the batches read ahead share the relay's byte bound: the reader reads
// only into the room they leave (held counts them), and waits for room when they fill it. Batches of
// small lines leave room for two more; batches of large ones are read one after another.
type prefetch struct {
	ch    chan fetched
	stop  chan struct{}
	done  chan struct{}
	held  atomic.Int64  // bytes of lines read and not yet released by the relay
	freed chan struct{} // a token after each release, for a reader waiting for room
}

func (r *Relay) startPrefetch(ctx context.Context, runID string, after, target int64, appending int64) *prefetch {
	p := &prefetch{ch: make(chan fetched, readAhead-1), stop: make(chan struct{}), done: make(chan struct{}),
		freed: make(chan struct{}, 1)}
	p.held.Store(appending)
	limit := int64(r.cfg.batchBytes)
	go func() {
		defer close(p.done)
		defer close(p.ch)
		last := appending
		for {
			room, ok := p.room(limit, min(last, limit))
			if !ok {
				return
			}
			l, m, err := r.s.pending(ctx, runID, after, r.cfg.batch, int(room))
			last = lineBytes(l)
			p.held.Add(last)
			end := err != nil || len(l) == 0
			if !end {
				// Read before the batch is handed over: the sink may do what it likes with it.
				after = l[len(l)-1].Seq
			}
			select {
			case p.ch <- fetched{l, m, err}:
			case <-p.stop:
				return
			}
			if end || (target > 0 && after >= target) {
				return
			}
		}
	}()
	return p
}

// room waits until the relay holds at most limit-want bytes and returns the room left; a want of
// about the last batch's size keeps the reader from cutting batches short. ok is false when the
// reader is stopped.
func (p *prefetch) room(limit, want int64) (room int64, ok bool) {
	for {
		if room = limit - p.held.Load(); room >= max(want, 1) {
			return room, true
		}
		select {
		case <-p.freed:
		case <-p.stop:
			return 0, false
		}
	}
}

// release gives back the room of a batch the relay no longer holds.
func (p *prefetch) release(n int64) {
	p.held.Add(-n)
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// next returns the next batch read; ok is false when the reader has stopped without one.
func (p *prefetch) next() (f fetched, ok bool) {
	f, ok = <-p.ch
	return f, ok
}

// close stops the reader and waits for it, so that none outlives the call that started it.
func (p *prefetch) close() {
	close(p.stop)
	<-p.done
}

func lineBytes(lines []EventLine) int64 {
	n := 0
	for _, l := range lines {
		n += len(l.Line)
	}
	return int64(n)
}

// project projects runID from its recorded position, batch after batch, until nothing is pending or
// the position reaches target (0: no target). It returns how many lines it placed.
//
// It holds the run's turn throughout (see projections): the position it starts from and the batches
// it reads ahead stay valid only while no other relay of the store appends the run's lines.
//
// A batch is recorded while the next one is appended (see recorder), and recorded before the one after
// that is appended, so a crash leaves at most two batches in the sink that are not recorded: K crashes
// re-send at most 2K batches.
func (r *Relay) project(ctx context.Context, runID string, target int64) (placed int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	turn, err := r.s.proj.acquire(ctx, runID)
	if err != nil {
		return 0, err
	}
	defer r.s.proj.release(runID, turn)
	if err := r.record(ctx, turn); err != nil {
		return 0, err
	}
	cursor, err := r.s.Projected(ctx, runID)
	if err != nil || (target > 0 && cursor >= target) {
		return 0, err
	}
	rec := recorder{r: r, turn: turn}
	defer func() {
		// The last batch's record ends before the turn is given up: another relay, RetireEvent and
		// Close rely on what the turn's holder leaves recorded or in turn.unrecorded.
		if rerr := rec.settle(); err == nil {
			err = rerr
		}
	}()
	src := batches{r: r, runID: runID, target: target}
	defer src.close()
	for {
		b, err := src.next(ctx, cursor)
		if err != nil || len(b.lines) == 0 {
			return placed, err
		}
		n := len(b.lines)
		last, err := r.place(ctx, &rec, runID, b.lines, b.toMark)
		if err != nil {
			return placed, err
		}
		placed += n
		cursor = last
		src.placed(b)
		if target > 0 && cursor >= target {
			return placed, nil
		}
	}
}

// batches are the batches project places, in order. The first two are read when asked for; from the
// second on, while a batch is being appended (the sink's fdatasync usually), the next ones are read
// ahead (see prefetch). The first is never read ahead, so a sink that keeps failing costs one bounded
// read per attempt.
type batches struct {
	r      *Relay
	runID  string
	target int64
	reads  int
	ahead  *prefetch
}

// batch is lines that follow the cursor without a hole, and the bytes of lines the reader ahead
// counted for it, to be given back once it is placed.
type batch struct {
	lines  []EventLine
	toMark []int64
	held   int64
}

// next returns the batch that follows cursor; an empty one when nothing is pending.
func (b *batches) next(ctx context.Context, cursor int64) (batch, error) {
	if b.ahead != nil {
		if f, ok := b.ahead.next(); ok {
			if f.err != nil {
				return batch{}, f.err
			}
			return b.cut(cursor, f.lines, f.toMark, lineBytes(f.lines))
		}
		// The reader stopped short of the cursor (a batch cut at a hole, or the target): read from
		// the cursor.
	}
	lines, toMark, err := b.r.s.pending(ctx, b.runID, cursor, b.r.cfg.batch, b.r.cfg.batchBytes)
	if err != nil {
		return batch{}, err
	}
	b.reads++
	held := lineBytes(lines)
	next, err := b.cut(cursor, lines, toMark, held)
	if err != nil || len(next.lines) == 0 {
		return next, err
	}
	if last := next.lines[len(next.lines)-1].Seq; b.reads == 2 && b.ahead == nil && (b.target == 0 || last < b.target) {
		// The reader ahead counts this batch among the bytes the relay holds.
		b.ahead = b.r.startPrefetch(ctx, b.runID, last, b.target, held)
	} else {
		next.held = 0
	}
	return next, nil
}

// cut keeps the lines that follow cursor without a hole (see contiguous).
func (b *batches) cut(cursor int64, lines []EventLine, toMark []int64, held int64) (batch, error) {
	if len(lines) == 0 {
		return batch{held: held}, nil
	}
	lines, err := contiguous(b.runID, cursor, lines)
	if err != nil {
		return batch{}, err
	}
	return batch{lines: lines, toMark: toMark, held: held}, nil
}

// placed gives back the room of a batch the sink now has.
func (b *batches) placed(p batch) {
	if b.ahead != nil && p.held > 0 {
		b.ahead.release(p.held)
	}
}

// close stops the reader ahead, if any.
func (b *batches) close() {
	if b.ahead != nil {
		b.ahead.close()
	}
}

// place appends one batch to the sink and starts its record, as one batch in flight that Close waits
// for until it is recorded, and returns the batch's last seq. A closing store refuses it before the
// append (ErrClosed).
//
// What is recorded is taken from the batch before the sink is called: the sink is handed the slice
// and may clear it, reorder it or rewrite its seqs, and none of that may move the recorded position
// to a line the sink was not given, or make the next batch look as if rows were missing.
func (r *Relay) place(ctx context.Context, rec *recorder, runID string, lines []EventLine, toMark []int64) (last int64, err error) {
	if err := r.s.proj.begin(); err != nil {
		return 0, err
	}
	first, last := lines[0].Seq, lines[len(lines)-1].Seq
	b := &batchRecord{runID: runID, last: last, toMark: marksUpTo(toMark, last), lines: len(lines)}
	appendErr := r.sink.Append(ctx, runID, lines)
	// The batch before this one was being recorded beside the append. Its record ends first: records
	// go in order, and a stop written below must not be cleared by an earlier batch's record.
	recErr := rec.settle()
	if appendErr != nil {
		r.s.proj.end()
		if errors.Is(appendErr, ErrSinkRefused) {
			r.stopped(ctx, runID, first, appendErr)
		}
		return 0, &sinkError{appendErr}
	}
	faultpoint.Hit(faultpoint.RelayAfterAppend)
	if recErr != nil {
		// The sink has this batch and the one before, neither recorded: one record covers both, by
		// whoever takes the run's turn next.
		rec.turn.unrecorded = rec.turn.unrecorded.merge(b)
		r.s.proj.end()
		return last, recErr
	}
	rec.turn.unrecorded = b
	rec.start(ctx, b)
	return last, nil
}

// stopped says, at Error level and durably in the book (RunStats.StoppedSeq), that the sink refused
// runID's batch starting at seq: no retry can cure it, so the run's projection stops here.
func (r *Relay) stopped(ctx context.Context, runID string, seq int64, err error) {
	r.cfg.log.Error("outbox: relay stopped: the sink refuses the run's lines; they stay stored, unprojected, until the line is retired (Store.RetireEvent) or the sink takes it",
		"run", runID, "seq", seq, "err", err)
	if rerr := r.s.recordStop(ctx, runID, seq, err.Error()); rerr != nil {
		r.cfg.log.Error("outbox: the relay's stop could not be recorded", "run", runID, "seq", seq, "err", rerr)
	}
}

// contiguous returns the prefix of lines that follows cursor without a hole. A hole at the front is
// ErrRowsMissing; a hole further on is reported when it reaches the front of a batch.
func contiguous(runID string, cursor int64, lines []EventLine) ([]EventLine, error) {
	for i, l := range lines {
		if want := cursor + 1 + int64(i); l.Seq != want {
			if i == 0 {
				return nil, fmt.Errorf("%w: run %q has seq %d where %d belongs", ErrRowsMissing, runID, l.Seq, want)
			}
			return lines[:i], nil
		}
	}
	return lines, nil
}

// retriable reports whether a failed batch is worth another attempt: a sink failure, or a transient
// store failure; not an ended context, a closed or failed store, missing rows, a sink's refusal, or a
// record the ledger refuses (a key given to two events), which no retry can change.
func retriable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	for _, permanent := range []error{ErrClosed, ErrRowsMissing, ErrSinkRefused, ErrAnnounceConflict,
		ErrUnknownEvent, ErrNotDurable, ErrSyncFailed, ErrReadOnly, ErrCallInsideTx} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}

func (r *Relay) backoff(ctx context.Context, d time.Duration) (next time.Duration, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return d, ctx.Err()
	case <-t.C:
	}
	return min(2*d, r.cfg.maxBackoff), nil
}

// drain projects runID up to target, trying a failing batch up to the configured attempts. Attempts
// are counted while no line gets through; any progress starts the count again.
func (r *Relay) drain(ctx context.Context, runID string, target int64) error {
	wait := r.cfg.minBackoff
	failures := 0
	for {
		n, err := r.project(ctx, runID, target)
		if err == nil {
			projected, err := r.s.Projected(ctx, runID)
			switch {
			case err != nil:
				return err
			case projected >= target:
				return nil
			case n == 0:
				// Nothing stored past the position: the lines up to target are gone, not pending.
				return fmt.Errorf("%w: run %q ends at %d, below %d", ErrRowsMissing, runID, projected, target)
			}
			continue
		}
		if n > 0 {
			failures, wait = 0, r.cfg.minBackoff
		}
		failures++
		if !retriable(ctx, err) || failures >= r.cfg.flushAttempts {
			return fmt.Errorf("project run %q after %d attempts: %w", runID, failures, err)
		}
		r.cfg.log.Debug("outbox: batch failed, retrying", "run", runID, "attempt", failures, "err", err)
		if wait, err = r.backoff(ctx, wait); err != nil {
			return err
		}
	}
}

// Flush projects every line of the relay's run committed before the call, and returns nil once the
// sink has them all and their progress is recorded. When the sink keeps failing it returns the sink's
// error, wrapped, after WithFlushAttempts tries of the failing batch, having sent nothing twice
// except that batch and skipped nothing.
func (r *Relay) Flush(ctx context.Context) error {
	target, err := r.s.lastSeq(ctx, r.runID)
	if err != nil {
		return err
	}
	return r.drain(ctx, r.runID, target)
}

// Recover projects what earlier runs committed and the sink may lack, byte-identical and in order,
// moves their once keys into the ledger, and then drops their projected rows. Call it once at start,
// before the run writes its first event. After it, the lines of earlier runs are in the sink and every
// once key they carried is in the ledger, so EnqueueOnce will not announce them again.
//
// It covers every run however many there are, a page at a time. It never touches the relay's own run
// or any run this Store has enqueued to since it was opened (another relay of this process projects
// those), and it never drops a row whose line is not in the sink; each run's highest seq is recorded
// before its rows go, so no run reuses a number.
//
// A run it cannot project for a reason of the run's own (the sink refuses a line of it:
// ErrSinkRefused; rows missing; a ledger conflict) does not stop the others: Recover projects every
// run it can, forgets only what it projected, and then returns an error naming each run it could not
// project and why (errors.Is finds each cause), so that an engine can start beside a stuck run and
// decide. A refusal is also recorded in the book (RunStats.StoppedSeq). A sink that keeps failing
// past WithFlushAttempts, a store that fails, or an ended ctx stops it at once (with the runs found
// stuck so far named too): the next run would meet the same.
func (r *Relay) Recover(ctx context.Context) error {
	var stuck []error
	var done []RunStats
	forget := func() error {
		if len(done) == 0 {
			return nil
		}
		n, err := r.s.forgetProjected(ctx, done)
		if err != nil {
			return err
		}
		if n > 0 {
			r.cfg.log.Debug("outbox: forgot earlier runs' projected lines", "lines", n)
		}
		done = done[:0]
		return nil
	}
	for run, err := range r.s.AllRuns(ctx) {
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		if run.RunID == r.runID || r.s.isLive(run.RunID) {
			continue
		}
		if run.Projected < run.storedLast {
			if err := r.drain(ctx, run.RunID, run.storedLast); err != nil {
				if !runStuck(ctx, err) {
					return fmt.Errorf("recover: %w", stuckRuns(append(stuck, err)))
				}
				// What drain placed before it stopped is recorded; the rest stays stored.
				stuck = append(stuck, err)
				r.cfg.log.Error("outbox: recovery could not project an earlier run; it goes on with the others",
					"run", run.RunID, "err", err)
				continue
			}
			r.cfg.log.Info("outbox: recovered an earlier run", "run", run.RunID,
				"from", run.Projected+1, "to", run.storedLast)
			run.Projected = run.storedLast // drain returns nil only once it is there
		}
		if run.Lines > run.LedgerLines {
			done = append(done, run)
			if len(done) == runsPage {
				if err := forget(); err != nil {
					return fmt.Errorf("recover: %w", err)
				}
			}
		}
	}
	faultpoint.Hit(faultpoint.RecoverBeforeForget)
	if err := forget(); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	faultpoint.Hit(faultpoint.RecoverAfterForget)
	return stuckError(stuck)
}

// stuckError is Recover's error for the runs it could not project, nil for none.
func stuckError(stuck []error) error {
	if len(stuck) > 0 {
		return fmt.Errorf("recover: %d earlier runs could not be projected, the others were: %w", len(stuck), stuckRuns(stuck))
	}
	return nil
}

// stuckRuns is the runs recovery could not project, each error naming its run, on one line.
type stuckRuns []error

func (e stuckRuns) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e stuckRuns) Unwrap() []error { return e }

// runStuck reports whether a run's failed projection is the run's own, so recovery may go on with the
// other runs: a refusal no retry can cure, not a failing sink, an ended context or a store that
// cannot go on.
func runStuck(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	for _, fatal := range []error{ErrClosed, ErrStoreBroken, ErrNotDurable, ErrSyncFailed, ErrReadOnly, ErrCallInsideTx} {
		if errors.Is(err, fatal) {
			return false
		}
	}
	return !retriable(ctx, err)
}

// Run projects the relay's run continuously until ctx ends, then returns ctx.Err(). It wakes on every
// commit made through the store and at the poll interval. While the sink fails it keeps the lines,
// backs off, and logs once when it starts failing and once when it recovers. It returns early only
// when projecting cannot succeed: a closed store, missing rows, or a sink's refusal (ErrSinkRefused),
// which it logs at Error level and records in the book (RunStats.StoppedSeq) before returning. Its
// caller should not drop that error: the run is not projected from there on.
func (r *Relay) Run(ctx context.Context) error {
	poll := time.NewTicker(r.cfg.poll)
	defer poll.Stop()
	wait := r.cfg.minBackoff
	for {
		changed := r.s.Changed()
		_, err := r.project(ctx, r.runID, 0)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !retriable(ctx, err) {
				return err
			}
			r.mu.Lock()
			if r.failing == nil {
				r.cfg.log.Warn("outbox: relay failing; lines are kept and retried", "run", r.runID, "err", err)
			}
			r.failing = err
			r.mu.Unlock()
			if wait, err = r.backoff(ctx, wait); err != nil {
				return err
			}
			continue
		}
		wait = r.cfg.minBackoff
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-poll.C:
		}
	}
}
