// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"sync"
	"sync/atomic"
)

// A writer has one connection. While the caller's code runs holding it (a WriteTx function, an
// EventBuilder or a line check, a handler), a call of the same writer's made from that code would
// wait for the connection it is itself holding, until its deadline. The floor refuses such a call at
// once. Its context tells it when the caller's code was given one (a handler's, see Mark); otherwise
// the call must be told from any other goroutine's by the goroutine it runs on, which Go does not
// name. The floor asks the operating system instead: the holder pins its goroutine to its thread
// while the caller's code runs (runtime.LockOSThread), so that no other goroutine runs on that
// thread meanwhile, and a check pins itself while it compares its thread with the holder's. Where
// the thread's id is not at hand, the goroutine's id is read from its stack header (see
// identity_other.go), at some microseconds a read, more on a deep stack.
//
// A call the caller's code hands to another goroutine and then waits for cannot be told from any
// other caller's: it waits for the writer and fails when its own deadline ends it.

// Holder marks the one goroutine that runs the caller's code holding the writer.
type Holder struct {
	id atomic.Int64 // the holder's identity (see enter); 0: none
}

// Hold marks the calling goroutine as running the caller's code holding the writer, until Release
// is called on the same goroutine with what Hold returned.
func (h *Holder) Hold() int64 {
	id := enter()
	h.id.Store(id)
	return id
}

// Release ends what Hold began. The mark is cleared only if it is still id's: another goroutine may
// hold it since (a group commit taken over).
func (h *Holder) Release(id int64) {
	h.id.CompareAndSwap(id, 0)
	leave()
}

// Inside reports whether the calling goroutine runs the caller's code holding the writer, or ctx is
// one that Mark gave such code. While nobody holds it, it costs one atomic load.
func (h *Holder) Inside(ctx context.Context) bool {
	if ctx != nil && ctx.Value(holderKey{}) == h {
		return true
	}
	if h.id.Load() == 0 {
		return false
	}
	return atHere(func(me int64) bool { return h.id.Load() == me })
}

// Mark returns ctx marked as one given to the caller's code while it holds the writer: a call made
// with it is inside, whatever goroutine makes it.
func (h *Holder) Mark(ctx context.Context) context.Context {
	if ctx.Value(holderKey{}) == h {
		return ctx
	}
	return context.WithValue(ctx, holderKey{}, h)
}

// Marked reports whether ctx is one Mark gave.
func (h *Holder) Marked(ctx context.Context) bool { return ctx.Value(holderKey{}) == h }

type holderKey struct{}

// Holders marks the goroutines that run the caller's code holding a connection of a pool each (a
// ReadTx function), any number at once.
type Holders struct {
	n  atomic.Int64
	mu sync.Mutex
	in map[int64]int
}

// Hold marks the calling goroutine until Release is called on it with what Hold returned.
func (hs *Holders) Hold() int64 {
	id := enter()
	hs.mu.Lock()
	if hs.in == nil {
		hs.in = map[int64]int{}
	}
	hs.in[id]++
	hs.mu.Unlock()
	hs.n.Add(1)
	return id
}

// Release ends what Hold began.
func (hs *Holders) Release(id int64) {
	hs.n.Add(-1)
	hs.mu.Lock()
	if hs.in[id]--; hs.in[id] <= 0 {
		delete(hs.in, id)
	}
	hs.mu.Unlock()
	leave()
}

// Inside reports whether the calling goroutine is one that Hold marked. While none is, it costs one
// atomic load.
func (hs *Holders) Inside() bool {
	if hs.n.Load() == 0 {
		return false
	}
	return atHere(func(me int64) bool {
		hs.mu.Lock()
		defer hs.mu.Unlock()
		return hs.in[me] > 0
	})
}
