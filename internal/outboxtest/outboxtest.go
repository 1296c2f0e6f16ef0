// Package outboxtest holds helpers shared by the tests of several packages.
package outboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// WaitProjected waits until the relay has recorded run's lines up to n, failing the test after
// timeout with how far it got.
func WaitProjected(t testing.TB, s *outbox.Store, run string, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := s.Projected(context.Background(), run)
		if err == nil && p == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: projected %d of %d after %v (%v)", run, p, n, timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
