// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"fmt"
	"testing"
)

// atDepth calls fn under n more frames, as a call made deep in a program's stack is.
//
//go:noinline
func atDepth(n int, fn func()) {
	if n == 0 {
		fn()
		return
	}
	atDepth(n-1, fn)
}

// BenchmarkNestedCallCheck prices the two halves of the nested-call check, the holder's mark (paid
// per write that runs the caller's code: a WriteTx, an enqueue without group commit, an inbox's write
// transaction) and a check made while another goroutine holds the writer (paid by every write that
// meets a transaction running the caller's code, a group commit's builders included), by the
// goroutine's id read from a stack trace and by the pinned thread, in the same run. A check while
// nobody holds the writer is one atomic load either way.
func BenchmarkNestedCallCheck(b *testing.B) {
	for _, depth := range []int{0, 32} {
		b.Run(fmt.Sprintf("mark/stack/depth=%d", depth), func(b *testing.B) {
			var sink int64
			atDepth(depth, func() {
				for b.Loop() {
					sink += stackGoroutineID()
				}
			})
			_ = sink
		})
		b.Run(fmt.Sprintf("mark/thread/depth=%d", depth), func(b *testing.B) {
			var h Holder
			atDepth(depth, func() {
				for b.Loop() {
					h.Release(h.Hold())
				}
			})
		})
		b.Run(fmt.Sprintf("check-while-held/stack/depth=%d", depth), func(b *testing.B) {
			holder := stackHeldElsewhere(b)
			var inside bool
			atDepth(depth, func() {
				for b.Loop() {
					inside = inside || stackGoroutineID() == holder
				}
			})
			if inside {
				b.Fatal("a check on another goroutine took itself for the holder")
			}
		})
		b.Run(fmt.Sprintf("check-while-held/thread/depth=%d", depth), func(b *testing.B) {
			h := threadHeldElsewhere(b)
			var inside bool
			atDepth(depth, func() {
				for b.Loop() {
					inside = inside || h.Inside(nil)
				}
			})
			if inside {
				b.Fatal("a check on another goroutine took itself for the holder")
			}
		})
	}
	b.Run("check-while-none-holds", func(b *testing.B) {
		var h Holder
		for b.Loop() {
			if h.Inside(nil) {
				b.Fatal("inside with no holder")
			}
		}
	})
}

// stackHeldElsewhere returns the stack-read id of a goroutine that stays parked until b ends.
func stackHeldElsewhere(b *testing.B) int64 {
	id, done := make(chan int64), make(chan struct{})
	go func() { id <- stackGoroutineID(); <-done }()
	b.Cleanup(func() { close(done) })
	return <-id
}

// threadHeldElsewhere returns a Holder that a goroutine holds, parked, until b ends.
func threadHeldElsewhere(b *testing.B) *Holder {
	h := &Holder{}
	held, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer h.Release(h.Hold())
		close(held)
		<-done
	}()
	<-held
	b.Cleanup(func() { close(done) })
	return h
}
