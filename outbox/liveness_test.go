// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"testing"
	"time"
)

// liveness bounds a wait for something that takes milliseconds; far above it, so that only a hang
// (a call waiting for itself until the operation timeout) reaches it.
const liveness = 20 * time.Second

// within runs fn on a goroutine of its own and fails the test if fn has not returned in a minute: a
// wedged writer must fail the test, not hang it.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s never returned", what)
	}
}
