// SPDX-License-Identifier: Apache-2.0

//go:build linux

package litedb

import (
	"runtime"
	"syscall"
)

// enter pins the calling goroutine to its thread and returns the thread's id: while it is pinned, no
// other goroutine runs on that thread, so the id names the goroutine.
func enter() int64 {
	runtime.LockOSThread()
	return int64(syscall.Gettid())
}

// leave unpins what enter pinned.
func leave() { runtime.UnlockOSThread() }

// atHere runs is with the calling goroutine's identity, pinned to its thread meanwhile: a holder
// whose mark is is's answer is then either this goroutine or not on this thread at all, even while
// the mark changes.
func atHere(is func(me int64) bool) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return is(int64(syscall.Gettid()))
}
