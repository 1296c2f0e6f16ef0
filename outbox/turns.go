// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/textmachine/outbox/internal/keyedturn"
)

// projections coordinates the relays of one store. Relays projecting the same run take turns: each
// reads the run's position, appends and records while it holds the run's turn, so two relays never
// append the same lines. And Close waits for the batches in flight (appended, not yet recorded), so a
// clean shutdown leaves nothing in the sink that the store has not recorded. Its zero value is ready.
type projections struct {
	turns keyedturn.Turns[runHeld] // per run; an entry is kept while it holds an unrecorded batch

	mu      sync.Mutex
	closing bool
	shut    chan struct{} // closed when Close begins; made at first use
	batches int           // batches between begin and end
	idle    chan struct{} // closed when batches drops to 0 while Close waits
}

// runTurn is one run's turn to project.
type runTurn = keyedturn.Turn[runHeld]

// runHeld is what the holders of a run's turn pass on to each other.
type runHeld struct {
	// unrecorded is a batch the sink has and the store has not recorded: its record failed. Whoever
	// takes the run's turn next records it before anything else is appended, so neither the relay
	// that appended it nor another one sends it again.
	unrecorded *batchRecord
}

// Keep keeps a run's turn while it holds a batch to record.
func (h *runHeld) Keep() bool { return h.unrecorded != nil }

func (p *projections) shutChan() chan struct{} {
	if p.shut == nil {
		p.shut = make(chan struct{})
	}
	return p.shut
}

// acquire waits for runID's turn. It fails with ctx's error when ctx ends first, and with ErrClosed
// when the store is closing.
func (p *projections) acquire(ctx context.Context, runID string) (*runTurn, error) {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	shut := p.shutChan()
	p.mu.Unlock()
	t, err := p.turns.Take(ctx, runID, shut)
	if errors.Is(err, keyedturn.ErrStopped) {
		return nil, ErrClosed
	}
	return t, err
}

// release gives runID's turn up.
func (p *projections) release(runID string, t *runTurn) {
	p.turns.Release(runID, t)
}

// begin registers a batch about to be appended, so that Close waits for its record. It fails with
// ErrClosed once Close has begun: a closing store starts no append.
func (p *projections) begin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return ErrClosed
	}
	p.batches++
	return nil
}

// end marks the batch begin registered as recorded, or given up.
func (p *projections) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches--
	if p.batches == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
}

// shutdown refuses new turns and appends, wakes the relays waiting for a turn, and waits up to wait
// for the batches in flight to be recorded. A sink that takes longer is not waited for: its batch is
// then recorded by no one, and sent again by the next process, as after a crash.
func (p *projections) shutdown(wait time.Duration) {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		close(p.shutChan())
	}
	if p.batches == 0 {
		p.mu.Unlock()
		return
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// closeWait is how long Close waits for a batch in flight: the operation timeout, or DefaultOpTimeout
// when the store has none.
func (s *Store) closeWait() time.Duration {
	if s.cfg.opTimeout > 0 {
		return s.cfg.opTimeout
	}
	return DefaultOpTimeout
}
