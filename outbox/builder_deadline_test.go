// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// Callers that share one context, whose deadline is from 1 µs to 1 ms, each with a builder that takes
// a few milliseconds: whichever of them the deadline reaches first gives up on the builder running,
// and the builder's own caller, whose deadline has passed too, is told its context's error (with
// ErrBuilderStuck beside it), never ErrBuilderStuck alone, which would say that another caller's
// deadline, not its own, ended its call. What each was told is what the book holds.
func TestACallerWhoseOwnDeadlinePassedIsToldItsContextsErrorEvenWhenAnotherCallerGaveUpOnItsBuilder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "book.db")
	// The operation timeout bounds no call here (each has a deadline), but Close's wait for the
	// builders still asleep.
	s := openShortOps(t, path, time.Second)
	got := newOutcomes()
	deadlines := []time.Duration{time.Microsecond, 10 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond, time.Millisecond}
	stuck := 0
	for round := range 100 {
		d := deadlines[round%len(deadlines)]
		ctx, cancel := context.WithTimeout(context.Background(), d)
		var wg sync.WaitGroup
		for c := range 8 {
			id := fmt.Sprintf("r%d-c%d", round, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				seq, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) {
					time.Sleep(3 * time.Millisecond)
					return fmt.Appendf(nil, "%s %d", id, seq), nil
				})
				got.record(id, seq, err)
				if err == nil {
					return
				}
				if errors.Is(err, outbox.ErrBuilderStuck) {
					got.mu.Lock()
					stuck++
					got.mu.Unlock()
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("call %s with a deadline of %v: %v, want an error wrapping context.DeadlineExceeded", id, d, err)
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	if err := s.Close(); err != nil && !errors.Is(err, outbox.ErrBuilderStuck) {
		t.Fatalf("Close: %v", err)
	}
	s2, err := outbox.Open(outboxtest.Patient(t), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	t.Logf("%d of %d calls stored, %d told their builder was given up on", got.check(t, storedByID(t, s2)), got.len(), stuck)
}
