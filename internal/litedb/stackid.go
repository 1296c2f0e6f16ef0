// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"bytes"
	"runtime"
	"strconv"
)

// stackGoroutineID returns the calling goroutine's id, read from its stack header ("goroutine 42
// [running]:"), where the thread's id is not at hand. It costs a stack trace, some microseconds, more
// on a deep stack.
func stackGoroutineID() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return -1 // never equal to a holder's
	}
	return id
}
