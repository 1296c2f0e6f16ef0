// SPDX-License-Identifier: Apache-2.0

// Package outboxtest holds what the tests of several packages share: a store in a temporary
// directory and ways to look into it, builders, an in-memory sink, and waits on a relay. A helper
// that can fail takes a testing.TB and fails the test itself.
package outboxtest

import (
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// WaitProjected waits until the relay has recorded run's lines up to n, failing the test after
// timeout with how far it got.
func WaitProjected(t testing.TB, s *outbox.Store, run string, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ctx := Patient(t)
	for {
		p, err := s.Projected(ctx, run)
		if err == nil && p == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: projected %d of %d after %v (%v)", run, p, n, timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ForkContinually starts short-lived child processes, one after another on two goroutines, until
// stop, and counts those that have come and gone. A child being forked holds a copy of every
// descriptor of the process until its exec closes them, locks' descriptors among them.
func ForkContinually(t testing.TB) (forks *atomic.Int64, stop func()) {
	t.Helper()
	// The lightest child there is; the test binary (slow to start under -race) where there is none.
	exe, args := "true", []string{}
	if _, err := exec.LookPath(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
		args = []string{"-test.run=^$"}
	}
	done := make(chan struct{})
	forks = new(atomic.Int64)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				exec.Command(exe, args...).Run()
				forks.Add(1)
			}
		}()
	}
	return forks, func() { close(done); wg.Wait() }
}
