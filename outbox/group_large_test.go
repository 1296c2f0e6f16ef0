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

// durableSoFar reports whether every commit written so far is durable.
func durableSoFar(s *Store) bool {
	d := s.dur
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.synced >= d.written.Load()
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

// TestASmallCallWaitingWhenALargeWriteEndsGoesBeforeTheNextLargeLine queues, while a large line is
// being written, the next large line of the same producer and then a small call: the small call runs
// first, in a group of its own, and its commit is durable before the next large line is written, so
// that its sync does not carry that line either.
func TestASmallCallWaitingWhenALargeWriteEndsGoesBeforeTheNextLargeLine(t *testing.T) {
	var b builds
	var durableFirst bool
	var s *Store
	s, enqueue, release, wait := largeWriteInProgress(t, &b)
	enqueue("large", b.build("L2", bigLine, func() { durableFirst = durableSoFar(s) }))
	waitQueued(t, s, 1)
	enqueue("small", b.build("S", []byte("small"), nil))
	waitQueued(t, s, 2)
	release()
	wait()
	if diff := cmp.Diff([]string{"L1", "S", "L2"}, b.got()); diff != "" {
		t.Errorf("builders ran in another order (-want +got):\n%s", diff)
	}
	if !durableFirst {
		t.Error("the next large line was written before the commits ahead of it were durable")
	}
}

// TestALargeCallIsPutBackBehindSmallCallsOnlyOnce: a large call put back behind the small calls
// waiting goes first in the next group, ahead of a small call that arrived meanwhile, so that small
// calls arriving without pause cannot hold a producer of large lines back for ever.
func TestALargeCallIsPutBackBehindSmallCallsOnlyOnce(t *testing.T) {
	var b builds
	s, enqueue, release, wait := largeWriteInProgress(t, &b)
	enqueue("large", b.build("L2", bigLine, nil))
	waitQueued(t, s, 1)
	// The first small call, when it runs, queues a second one behind the large call put back.
	enqueue("small", b.build("S1", []byte("small"), func() {
		enqueue("small", b.build("S2", []byte("small"), nil))
		waitQueued(t, s, 1)
	}))
	waitQueued(t, s, 2)
	release()
	wait()
	if diff := cmp.Diff([]string{"L1", "S1", "L2", "S2"}, b.got()); diff != "" {
		t.Errorf("builders ran in another order (-want +got):\n%s", diff)
	}
}

// TestARunIsTreatedAsLargeOnlyWhileItsLastLineWasLarge: once a run that wrote a large line writes a
// small one, its calls keep their place in the queue again.
func TestARunIsTreatedAsLargeOnlyWhileItsLastLineWasLarge(t *testing.T) {
	var b builds
	s, enqueue, release, wait := largeWriteInProgress(t, &b)
	// The run's next line is small: after it, the run is no longer put back.
	enqueue("large", b.build("L2-small", []byte("small"), nil))
	waitQueued(t, s, 1)
	enqueue("small", b.build("S1", []byte("small"), nil))
	waitQueued(t, s, 2)
	release()
	wait()
	if _, err := s.EnqueueEvent(context.Background(), "large", line("small again")); err != nil {
		t.Fatal(err)
	}
	if s.group.isLarge("large") {
		t.Error("the run is still taken for a writer of large lines after writing small ones")
	}
	if diff := cmp.Diff([]string{"L1", "S1", "L2-small"}, b.got()); diff != "" {
		t.Errorf("builders ran in another order (-want +got):\n%s", diff)
	}
}

// TestALargeCallWaitsForTheSmallCallersReleasedWithIt: when the last sync released small callers
// together with the large producer's, and the large call reaches the committer first, the committer
// waits for as many callers as the sync released and puts the small ones first. The wait is lengthened
// here so that the order does not depend on how fast the small caller comes back; it ends as soon as
// the caller has.
func TestALargeCallWaitsForTheSmallCallersReleasedWithIt(t *testing.T) {
	s := &Store{dur: newDurability()}
	c := &committer{s: s, queue: make(chan *request, maxGroup), largeWait: time.Minute}
	c.noteLine("large", len(bigLine))
	s.dur.released.Store(2) // the large producer's caller and one small caller
	large, small := &request{runID: "large"}, &request{runID: "small"}
	go func() {
		time.Sleep(10 * time.Millisecond) // the small caller comes back a moment later
		c.queue <- small
	}()
	t0 := time.Now()
	group := c.gatherBeforeLarge([]*request{large})
	if diff := cmp.Diff([]*request{small, large}, group, cmp.Comparer(func(a, b *request) bool { return a == b })); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	if waited := time.Since(t0); waited > 30*time.Second {
		t.Errorf("the wait ran to its bound (%v) though every caller released had come back", waited)
	}
	// A large call released alone waits for nobody.
	s.dur.released.Store(1)
	if group := c.gatherBeforeLarge([]*request{large}); len(group) != 1 {
		t.Errorf("a lone large call gathered %d calls", len(group))
	}
}
