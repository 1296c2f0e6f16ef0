// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// bigLine is a line large enough to end its group: a large write.
var bigLine = bytes.Repeat([]byte("x"), maxGroupBytes)

// builds records the order in which the committer ran the builders it was given.
type builds struct {
	mu    sync.Mutex
	order []string
}

func (b *builds) build(name string, out []byte, then func()) EventBuilder {
	return func(int64) ([]byte, error) {
		b.mu.Lock()
		b.order = append(b.order, name)
		b.mu.Unlock()
		if then != nil {
			then()
		}
		return out, nil
	}
}

func (b *builds) got() []string { b.mu.Lock(); defer b.mu.Unlock(); return slices.Clone(b.order) }

// waitQueued waits until n calls wait in the committer's queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(s.group.queue) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls queued, want %d", len(s.group.queue), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// largeWriteInProgress opens a store whose run "large" has written a large line, and starts a second
// large line whose builder holds the committer until the returned release is called: a large write
// in progress. done receives the errors of the calls started through enqueue.
func largeWriteInProgress(t *testing.T, b *builds) (s *Store, enqueue func(run string, build EventBuilder), release func(), wait func()) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.EnqueueEvent(ctx, "large", line(string(bigLine))); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	enqueue = func(run string, build EventBuilder) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.EnqueueEvent(ctx, run, build); err != nil {
				t.Error(err)
			}
		}()
	}
	hold, building := make(chan struct{}), make(chan struct{})
	enqueue("large", b.build("L1", bigLine, func() { close(building); <-hold }))
	<-building
	return s, enqueue, func() { close(hold) }, wg.Wait
}

// TestAGroupEndsAtTheLineThatReachesItsByteBound: two large lines queued together, and a small call
// behind them, while a large write is in progress: each large line is written and committed in a group
// of its own, so a small call waits for the large lines queued ahead of it one at a time, never for a
// group that carries several.
func TestAGroupEndsAtTheLineThatReachesItsByteBound(t *testing.T) {
	var b builds
	s, enqueue, release, wait := largeWriteInProgress(t, &b)
	var mu sync.Mutex
	written := map[string]uint64{} // the commits written when each builder ran
	note := func(name string) func() {
		return func() {
			mu.Lock()
			written[name] = s.dur.written.Load()
			mu.Unlock()
		}
	}
	enqueue("large", b.build("L2", bigLine, note("L2")))
	waitQueued(t, s, 1)
	enqueue("large", b.build("L3", bigLine, note("L3")))
	waitQueued(t, s, 2)
	enqueue("small", b.build("S", []byte("s"), note("S")))
	waitQueued(t, s, 3)
	release()
	wait()
	if diff := cmp.Diff([]string{"L1", "L2", "L3", "S"}, b.got()); diff != "" {
		t.Errorf("builders ran in another order (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	if written["L3"] <= written["L2"] || written["S"] <= written["L3"] {
		t.Errorf("commits written when L2, L3 and S were built: %d, %d, %d; want each after a commit of the line before",
			written["L2"], written["L3"], written["S"])
	}
}
