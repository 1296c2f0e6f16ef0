// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"fmt"
)

// A relay records each batch after the sink has it: the run's new position, and the batch's once
// keys moved into the ledger, in one write transaction, before it reads the next batch. So at most one
// batch is in the sink and not recorded: a crash re-sends at most that one, byte for byte, and the
// reader, which keys lines by (run, seq) and compares their bytes, keeps one copy of each. A clean
// Close re-sends nothing: it waits for the record in flight.

// batchRecord is what recording a batch writes: the run's new position and the once keys to move
// into the ledger.
type batchRecord struct {
	runID  string
	last   int64
	toMark []ledgerMark
	lines  int
}

// record records the batch the sink has and the store has not, if there is one, and waits for it.
// Call it holding the run's turn, and mu.
func (r *Relay) record(ctx context.Context, turn *runTurn) error {
	b := turn.Held.unrecorded
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

// recorded is what follows b's record: the turn no longer holds it, and a failing relay says it has
// recovered. WithOnProjected hears of it after (report), once the turn holds nothing unrecorded: the
// callback is the caller's code, and one that panics or ends the goroutine must not leave a batch
// appended that no one will record.
func (r *Relay) recorded(turn *runTurn, b *batchRecord) {
	if turn.Held.unrecorded == b {
		turn.Held.unrecorded = nil
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
