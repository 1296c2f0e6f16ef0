// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"sync/atomic"
)

type fetched struct {
	lines  []EventLine
	toMark []ledgerMark
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
	toMark []ledgerMark
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
func (b *batches) cut(cursor int64, lines []EventLine, toMark []ledgerMark, held int64) (batch, error) {
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
