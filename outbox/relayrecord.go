// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"fmt"
)

// A relay records each batch after the sink has it: the run's new position, and the batch's once
// keys moved into the ledger, in one write transaction. That transaction costs about a fifth of what
// the append of a batch into a file costs (an fdatasync), and the relay used to wait for it before
// appending the next batch. Now the record runs on a goroutine of its own while the relay appends the
// next batch, and the relay waits for it only before it records that next batch: the records stay in
// order, each made only after the sink has its lines, and the append, not the record, sets the pace.
//
// The price is in what a crash re-sends. A batch is recorded before the one after next is appended,
// so at most two batches are in the sink and not recorded, where one was before: a crash re-sends at
// most those two, byte for byte, and the reader, which keys lines by (run, seq) and compares their
// bytes, keeps one copy of each. A clean Close re-sends nothing: it waits for the records in flight.

// batchRecord is what recording a batch writes: the run's new position and the once keys to move
// into the ledger.
type batchRecord struct {
	runID  string
	last   int64
	toMark []ledgerMark
	lines  int
}

// merge is the record of a and then b, two batches of one run in order: one record of it is the
// records of both.
func (a *batchRecord) merge(b *batchRecord) *batchRecord {
	if a == nil {
		return b
	}
	return &batchRecord{runID: b.runID, last: b.last, toMark: append(a.toMark[:len(a.toMark):len(a.toMark)], b.toMark...),
		lines: a.lines + b.lines}
}

// recorder records a relay's batches in order, each beside the append of the next one. Its methods
// are called by the holder of the run's turn; only the record itself runs elsewhere.
type recorder struct {
	r    *Relay
	turn *runTurn
	b    *batchRecord // being recorded
	done chan error   // its outcome
	// heard is the batch settle found recorded, for report to tell WithOnProjected of.
	heard *batchRecord
}

// start records b, which the sink has and which is turn.unrecorded, on a goroutine of its own. The
// batch stays in flight for Close (proj.begin, taken by place) until its record returns.
func (rc *recorder) start(ctx context.Context, b *batchRecord) {
	rc.b, rc.done = b, make(chan error, 1)
	go func() {
		err := rc.r.recordBatch(ctx, b)
		rc.r.s.proj.end()
		rc.done <- err
	}()
}

// settle waits for the record in flight, if any. On success the batch is no longer unrecorded (report
// then tells WithOnProjected of it); on failure it stays turn.unrecorded, for the next holder of the
// turn to record first.
func (rc *recorder) settle() error {
	if rc.done == nil {
		return nil
	}
	err := <-rc.done
	b := rc.b
	rc.b, rc.done = nil, nil
	if err != nil {
		return err
	}
	rc.r.recorded(rc.turn, b)
	rc.heard = b
	return nil
}

// report tells WithOnProjected of the batch settle found recorded, if any. It is called once the
// turn holds every batch the sink has and the store has not recorded (turn.unrecorded): the callback
// is the caller's code, and one that panics or ends the goroutine must not leave a batch appended
// that no one will record, for the next relay to send again.
func (rc *recorder) report() {
	b := rc.heard
	rc.heard = nil
	if b != nil {
		rc.r.report(b)
	}
}

// record records the batch the sink has and the store has not, if there is one, and waits for it.
// Call it holding the run's turn, and mu.
func (r *Relay) record(ctx context.Context, turn *runTurn) error {
	b := turn.unrecorded
	if b == nil {
		return nil
	}
	if err := r.recordBatch(ctx, b); err != nil {
		return err
	}
	r.recorded(turn, b)
	r.report(b)
	return nil
}

// recordBatch writes b's record.
//
// The sink holds the batch whatever the caller's context does now, so its record does not take that
// context's end (a signal.NotifyContext cancelled on SIGINT, an engine that cancels Run before Close):
// dropped, it would make the next relay send the batch again. It is bounded by the operation timeout
// instead (DefaultOpTimeout when the store has none), the wait Close gives a batch in flight.
func (r *Relay) recordBatch(ctx context.Context, b *batchRecord) error {
	ctx, cancel := bounded(context.WithoutCancel(ctx), r.s.closeWait(), errRecordOverran)
	defer cancel()
	if err := r.s.recordProjected(ctx, b.runID, b.last, b.toMark, r.cfg.forget, b.lines); err != nil {
		return fmt.Errorf("record lines up to %d of run %q as projected: %w", b.last, b.runID, err)
	}
	return nil
}

// recorded is what follows b's record, on the relay's goroutine: the turn no longer holds it, and a
// failing relay says it has recovered. WithOnProjected hears of it after (report).
func (r *Relay) recorded(turn *runTurn, b *batchRecord) {
	if turn.unrecorded == b {
		turn.unrecorded = nil
	}
	if r.failing != nil {
		// The change of state is the first batch that gets through, not the end of a drain.
		r.cfg.log.Info("outbox: relay recovered", "run", b.runID, "after", r.failing)
		r.failing = nil
	}
}

// report tells WithOnProjected of b, recorded.
func (r *Relay) report(b *batchRecord) {
	if r.cfg.onProjected != nil {
		r.cfg.onProjected(b.runID, b.lines, b.last)
	}
}

// marksUpTo returns the marks of toMark up to last: contiguous may have cut the batch short.
func marksUpTo(toMark []ledgerMark, last int64) []ledgerMark {
	for i, m := range toMark {
		if m.seq > last {
			return toMark[:i]
		}
	}
	return toMark
}
