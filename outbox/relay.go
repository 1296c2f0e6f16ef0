// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"
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

// Relay projects a store's lines to a sink: in seq order per run, in bounded batches, recording after
// each batch how far it got and moving the batch's once keys into the ledger. A line is recorded only
// after the sink has it, and recorded before the next batch is read, so a crash re-sends at most the
// one batch in flight, byte for byte. It never skips one.
//
// A relay serves one run, its own (runID), and Recover serves the runs of earlier processes. Its
// methods are safe for concurrent use; batches are projected one at a time, and Run runs once at a
// time (ErrRelayRunning). Relays of one Store that project the same run take turns, so none appends
// a line another has appended; a relay waiting for its turn gives up when its context ends.
type Relay struct {
	s     *Store
	sink  Sink
	runID string
	cfg   relayConfig

	running atomic.Bool // a Run is under way (ErrRelayRunning)

	mu      sync.Mutex // one batch at a time; guards failing
	failing error      // the error of the last failed batch, until a batch succeeds

	bookMu      sync.Mutex // guards the comparison of the sink with the book (checkBook)
	bookChecked bool
	bookErr     error
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
		forget:        true,
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

// project projects runID from its recorded position, batch after batch, until nothing is pending or
// the position reaches target (0: no target). It returns how many lines it placed.
//
// It holds the run's turn throughout (see projections): the position it starts from stays valid only
// while no other relay of the store appends the run's lines. Each batch is recorded before the next
// one is read, so a crash leaves at most one batch in the sink that is not recorded: K crashes re-send
// at most K batches.
func (r *Relay) project(ctx context.Context, runID string, target int64) (placed int, err error) {
	// Called from inside a transaction of the store (a WriteTx function, a builder), the relay could
	// append but never record: the record waits for the writer that transaction holds. So the call is
	// refused here, before anything reaches the sink.
	if err := r.s.checkNotInsideTx(); err != nil {
		return 0, err
	}
	if err := r.checkBook(ctx); err != nil {
		return 0, err
	}
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
	for {
		lines, toMark, err := r.s.pending(ctx, runID, cursor, r.cfg.batch, r.cfg.batchBytes)
		if err != nil {
			return placed, err
		}
		if lines, err = contiguous(runID, cursor, lines); err != nil || len(lines) == 0 {
			return placed, err
		}
		n := len(lines)
		last, err := r.place(ctx, turn, runID, lines, toMark)
		if err != nil {
			return placed, err
		}
		placed += n
		cursor = last
		if target > 0 && cursor >= target {
			return placed, nil
		}
	}
}

// place appends one batch to the sink and records it, as one batch in flight that Close waits for
// until it is recorded, and returns the batch's last seq. A closing store refuses it before the append
// (ErrClosed). A record that fails leaves the batch in turn.Held.unrecorded, for whoever takes the
// run's turn next to record before anything else is appended.
//
// What is recorded is taken from the batch before the sink is called: the sink is handed the slice
// and may clear it, reorder it or rewrite its seqs, and none of that may move the recorded position
// to a line the sink was not given, or make the next batch look as if rows were missing.
func (r *Relay) place(ctx context.Context, turn *runTurn, runID string, lines []EventLine, toMark []ledgerMark) (last int64, err error) {
	if err := r.s.proj.begin(); err != nil {
		return 0, err
	}
	// Every way out ends the batch for Close, a sink's panic included: a batch left registered would
	// make every Close wait out its whole wait.
	defer r.s.proj.end()
	first, last := lines[0].Seq, lines[len(lines)-1].Seq
	b := &batchRecord{runID: runID, last: last, toMark: marksUpTo(toMark, last), lines: len(lines)}
	if err := r.appendToSink(ctx, runID, lines); err != nil {
		if errors.Is(err, ErrSinkRefused) {
			r.stopped(ctx, runID, first, err)
		}
		return 0, &sinkError{err}
	}
	// The sink has this batch and the store has not recorded it: a crash here leaves it to be sent
	// again, and nothing more.
	faultpoint.Hit(faultpoint.RelayAfterAppend)
	turn.Held.unrecorded = b
	return last, r.record(ctx, turn)
}

// appendToSink calls the sink's Append and tells the observer, if any, how it went. The batch's size
// is taken before the call: the sink may clear the slice.
func (r *Relay) appendToSink(ctx context.Context, runID string, lines []EventLine) error {
	o := r.cfg.observer
	if o == nil {
		return r.sink.Append(ctx, runID, lines)
	}
	a := SinkAppend{RunID: runID, Lines: len(lines)}
	for _, l := range lines {
		a.Bytes += len(l.Line)
	}
	start := time.Now()
	a.Err = r.sink.Append(ctx, runID, lines)
	a.Elapsed = time.Since(start)
	o.ObserveAppend(a)
	return a.Err
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
	for _, permanent := range []error{ErrClosed, ErrRowsMissing, ErrSinkRefused, ErrAnnounceConflict, ErrBookBehind,
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
// moves their once keys into the ledger, and then drops their projected rows, and replaces the line
// of each projected ledger row that still holds one with its digest (see LineDigest), a bounded step
// at a time. Call it once at start,
// before the run writes its first event. After it, the lines of earlier runs are in the sink and every
// once key they carried is in the ledger, so EnqueueOnce will not announce them again.
//
// Like a relay's every first call, it first compares a sink that is a RunLister with the book, and
// stops with ErrBookBehind, appending nothing, when the sink holds lines the book never recorded.
//
// It visits only the runs that can need it, however many there are, a page at a time: runs with lines
// pending (a run a relay stopped on has those) or projected rows not yet forgotten (OpenRuns); a run
// that is finished costs it nothing. It never touches the relay's own run or any run this Store has
// enqueued to since it was opened (another relay of this process projects those), and it never drops
// a row whose line is not in the sink; each run's highest seq is recorded before its rows go, so no
// run reuses a number. Rows are dropped in bounded steps of a few thousand (see WithForgetProjected),
// each its own transaction that records how far it got, giving way to the engine's writers between
// steps: however many rows earlier runs left, no transaction grows with them, and a crash or an ended
// ctx in the middle leaves the rest for the next start.
//
// A run it cannot project for a reason of the run's own (the sink refuses a line of it:
// ErrSinkRefused; rows missing; a ledger conflict) does not stop the others: Recover projects every
// run it can, forgets only what is projected, and then returns an error naming each run it could not
// project and why (errors.Is finds each cause), so that an engine can start beside a stuck run and
// decide. A refusal is also recorded in the book (RunStats.StoppedSeq). A sink that keeps failing
// past WithFlushAttempts, a store that fails, or an ended ctx stops it at once (with the runs found
// stuck so far named too): the next run would meet the same.
func (r *Relay) Recover(ctx context.Context) error {
	if err := r.checkBook(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	var stuck []error
	for run, err := range r.s.OpenRuns(ctx) {
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		if run.RunID == r.runID || r.s.isLive(run.RunID) || run.Projected >= run.storedLast {
			continue
		}
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
	}
	faultpoint.Hit(faultpoint.RecoverBeforeForget)
	// A second walk of the runs that can need work: the drains above moved their positions, and
	// forgetting as it went left the first walk's pages behind.
	var forgotten int64
	for run, err := range r.s.OpenRuns(ctx) {
		if err != nil {
			return fmt.Errorf("recover: %w", errors.Join(err, stuckError(stuck)))
		}
		if run.RunID == r.runID || r.s.isLive(run.RunID) || run.forgotten >= run.Projected {
			continue
		}
		n, err := r.s.forgetRun(ctx, run.RunID, false)
		forgotten += n
		if err != nil {
			return fmt.Errorf("recover: forget the projected lines of run %q: %w", run.RunID, errors.Join(err, stuckError(stuck)))
		}
	}
	if forgotten > 0 {
		r.cfg.log.Debug("outbox: forgot earlier runs' projected lines", "lines", forgotten)
	}
	faultpoint.Hit(faultpoint.RecoverAfterForget)
	if _, err := r.s.closeFinishedRuns(ctx); err != nil {
		return fmt.Errorf("recover: %w", errors.Join(err, stuckError(stuck)))
	}
	if n, err := r.s.emptyLedgerLines(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	} else if n > 0 {
		r.cfg.log.Debug("outbox: replaced projected ledger lines with their digests", "lines", n)
	}
	if err := r.s.givePagesBack(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
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
	for _, fatal := range []error{ErrClosed, ErrStoreBroken, ErrNotDurable, ErrSyncFailed, ErrReadOnly, ErrCallInsideTx, ErrBookBehind} {
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
//
// A relay runs one Run at a time: a second call while one is under way returns ErrRelayRunning at
// once. Two loops of one relay would take turns on every batch and share one failure state, each
// logging the other's recovery.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRelayRunning
	}
	defer r.running.Store(false)
	poll := time.NewTicker(r.cfg.poll)
	defer poll.Stop()
	wait := r.cfg.minBackoff
	for {
		changed := r.s.nextCommit()
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
