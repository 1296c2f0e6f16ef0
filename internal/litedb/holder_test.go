// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOnlyTheHoldersOwnGoroutineIsInsideWhileGoroutinesMoveBetweenThreads: while one goroutine holds
// the writer and yields again and again, so that the others run on every thread it leaves, none of
// them is ever taken for it, and it always is; once it releases, it is not either.
func TestOnlyTheHoldersOwnGoroutineIsInsideWhileGoroutinesMoveBetweenThreads(t *testing.T) {
	t.Parallel()
	var h Holder
	var hs Holders
	var stop atomic.Bool
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if h.Inside(context.Background()) || hs.Inside() {
					wrong.Add(1)
				}
				runtime.Gosched()
			}
		}()
	}
	held := make(chan struct{})
	go func() {
		defer close(held)
		for range 200 {
			id := h.Hold()
			rid := hs.Hold()
			for range 20 {
				if !h.Inside(context.Background()) || !hs.Inside() {
					t.Error("the holder's own check found it outside")
				}
				runtime.Gosched()
			}
			hs.Release(rid)
			h.Release(id)
			if h.Inside(context.Background()) || hs.Inside() {
				t.Error("the holder found itself inside after its release")
			}
		}
	}()
	<-held
	stop.Store(true)
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d checks on other goroutines were taken for the holder's", n)
	}
}

// TestAMarkedContextIsInsideOnAnyGoroutine: a context given to the caller's code marks its calls,
// whatever goroutine makes them, and only for the writer that marked it.
func TestAMarkedContextIsInsideOnAnyGoroutine(t *testing.T) {
	t.Parallel()
	var h, other Holder
	ctx := h.Mark(context.Background())
	done := make(chan [2]bool)
	go func() { done <- [2]bool{h.Inside(ctx), other.Inside(ctx)} }()
	if got := <-done; !got[0] || got[1] {
		t.Errorf("inside (its writer, another) = %v, want [true false]", got)
	}
	if h.Mark(ctx) != ctx {
		t.Error("marking a marked context made another")
	}
}
