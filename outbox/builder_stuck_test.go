// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// groupCall is one call lined up in a group: who it is, its context and its builder.
type groupCall struct {
	id    string
	ctx   context.Context
	build outbox.EventBuilder
}

// named renders a line that starts with the call's id, for storedByID.
func named(id string) outbox.EventBuilder {
	return func(seq int64) ([]byte, error) { return fmt.Appendf(nil, "%s %d", id, seq), nil }
}

// lineUpInOneGroup holds the committer inside the commit of a first call ("first"), queues calls
// behind it in order, so that they make one group, lets the committer go, and returns a channel that
// gets each call's id as it returns; what each was told goes into got.
func lineUpInOneGroup(t *testing.T, s *outbox.Store, got *outcomes, calls ...groupCall) <-chan string {
	t.Helper()
	hold, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	faultpoint.Set(func(p string) {
		if p == faultpoint.BeforeCommit {
			once.Do(func() { close(hold); <-release })
		}
	})
	t.Cleanup(func() { faultpoint.Set(nil) })
	returned := make(chan string, len(calls)+1)
	enqueue := func(c groupCall) {
		seq, err := s.EnqueueEvent(c.ctx, "r", c.build)
		got.record(c.id, seq, err)
		returned <- c.id
	}
	// The first call only holds the committer while the others line up: a deadline of its own keeps
	// a short operation timeout from ending it on a loaded machine.
	go enqueue(groupCall{"first", outboxtest.Patient(t), named("first")})
	<-hold
	for i, c := range calls {
		go enqueue(c)
		for outbox.QueuedCalls(s) < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
	return returned
}

// storedByID reads run r's lines, each "id seq", and returns the seq each id is stored at.
func storedByID(t *testing.T, s *outbox.Store) map[string]int64 {
	t.Helper()
	lines, err := s.PendingEvents(outboxtest.Patient(t), "r", 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for i, l := range lines {
		if l.Seq != int64(i+1) {
			t.Fatalf("stored seqs %v are not dense", outboxtest.SeqsOf(lines))
		}
		id, seq, ok := strings.Cut(string(l.Line), " ")
		if !ok || seq != fmt.Sprint(l.Seq) {
			t.Fatalf("line %d is %q", l.Seq, l.Line)
		}
		stored[id] = l.Seq
	}
	return stored
}

// openShortOps opens a store at path with the operation timeout d. Open's own context has a
// deadline, so that the short timeout bounds the calls, not Open's migrations on a loaded machine.
func openShortOps(t *testing.T, path string, d time.Duration) *outbox.Store {
	t.Helper()
	s, err := outbox.Open(outboxtest.Patient(t), path, outbox.WithOpTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blockedBuilder never returns until the test ends, and reports whether it has returned; entered is
// closed once it has been called.
func blockedBuilder(t *testing.T) (b outbox.EventBuilder, returned *atomic.Bool, entered <-chan struct{}) {
	free, in := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(free) })
	var once sync.Once
	returned = &atomic.Bool{}
	return func(seq int64) ([]byte, error) {
		once.Do(func() { close(in) })
		<-free
		returned.Store(true)
		return fmt.Appendf(nil, "stuck %d", seq), nil
	}, returned, in
}

// A builder that sleeps 8 s, grouped after a call with a 2 s deadline, on a store whose operation
// timeout is 200 ms: the call before it returns long before the builder does, stored and told so, and
// the slow builder's own call, bounded by the operation timeout, fails with ErrBuilderStuck and
// stores nothing. Before, the first caller waited the whole 8 s for its group's commit.
func TestACallGroupedBeforeASlowBuilderReturnsByItsOwnDeadline(t *testing.T) {
	s := openShortOps(t, filepath.Join(t.TempDir(), "book.db"), 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	var slept atomic.Bool
	slow := func(seq int64) ([]byte, error) {
		select {
		case <-time.After(8 * time.Second):
		case <-done:
		}
		slept.Store(true)
		return fmt.Appendf(nil, "slow %d", seq), nil
	}
	got := newOutcomes()
	returned := lineUpInOneGroup(t, s, got,
		groupCall{"deadline", ctx, named("deadline")},
		groupCall{"slow", context.Background(), slow},
		groupCall{"after", long, named("after")})
	for range 4 {
		<-returned
	}
	if slept.Load() {
		t.Fatal("the calls returned only once the slow builder had")
	}
	c := got.got
	if c["deadline"].err != nil || c["after"].err != nil {
		t.Fatalf("the calls beside the slow builder: %v, %v; want both stored", c["deadline"].err, c["after"].err)
	}
	if err := c["slow"].err; !errors.Is(err, outbox.ErrBuilderStuck) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), `run "r"`) {
		t.Fatalf("the slow builder's call: %v, want ErrBuilderStuck naming run r, and its deadline", err)
	} else if strings.Count(err.Error(), "outbox:") != 1 {
		t.Errorf("the slow builder's call: %q names the package more than once", err)
	}
	got.check(t, storedByID(t, s))
	if seq, err := s.EnqueueEvent(outboxtest.Patient(t), "r", named("next")); err != nil || seq != 4 {
		t.Fatalf("the next call: %d, %v; want seq 4", seq, err)
	}
}

// A builder that never returns, whose own caller waits for an hour: the caller grouped before it
// gives up when its own context ends, which fails the stuck call (ErrBuilderStuck, nothing stored)
// and commits the call before it, which is told so; the call grouped after it goes to the next group
// and commits. Close then returns within the operation timeout, naming the builder that is still
// stuck.
func TestABuilderThatNeverReturnsHoldsNoOtherCallerNorClose(t *testing.T) {
	s := openShortOps(t, filepath.Join(t.TempDir(), "book.db"), 200*time.Millisecond)
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	// The first caller's context ends once the builder is stuck, not at a deadline: one counted from
	// before the calls were lined up could pass while they still are, on a loaded machine, and the
	// call would then be withdrawn before its group was built. Its parent's deadline keeps the
	// operation timeout from bounding it instead.
	short, cancel := context.WithCancel(long)
	defer cancel()
	stuck, stuckReturned, entered := blockedBuilder(t)
	got := newOutcomes()
	returned := lineUpInOneGroup(t, s, got,
		groupCall{"short", short, named("short")},
		groupCall{"stuck", long, stuck},
		groupCall{"after", long, named("after")})
	<-entered
	cancel()
	for range 4 {
		<-returned
	}
	c := got.got
	if c["short"].err != nil || c["after"].err != nil {
		t.Fatalf("the calls beside the stuck builder: %v, %v; want both stored", c["short"].err, c["after"].err)
	}
	if err := c["stuck"].err; !errors.Is(err, outbox.ErrBuilderStuck) || !strings.Contains(err.Error(), "building line 3") {
		t.Fatalf("the stuck builder's call: %v, want ErrBuilderStuck naming line 3", err)
	}
	got.check(t, storedByID(t, s))
	err := s.Close()
	if !errors.Is(err, outbox.ErrBuilderStuck) || !strings.Contains(err.Error(), `line 3 of run "r"`) {
		t.Fatalf("Close with a builder still stuck: %v, want ErrBuilderStuck naming line 3 of run r", err)
	}
	if stuckReturned.Load() {
		t.Fatal("Close returned only once the builder had")
	}
}

// Producers with deadlines from 0 to 50 ms, some with none (the operation timeout bounds them), whose
// builders return at once, sleep, or never return: every call returns, and what it was told is what
// the book holds: told a seq, stored there; told an error, not stored.
func TestWhatEachCallIsToldBesideStuckBuildersIsWhatIsStored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "book.db")
	s := openShortOps(t, path, 50*time.Millisecond)
	stuck, _, _ := blockedBuilder(t)
	got := newOutcomes()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 25 {
				id := fmt.Sprintf("w%d-c%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(50))*time.Millisecond)
				if rng.IntN(4) == 0 {
					ctx, cancel = context.WithCancel(context.Background())
				}
				build := named(id)
				switch rng.IntN(10) {
				case 0:
					// Drawn here: the builder runs on the committer's goroutine.
					never, sleep := rng.IntN(8) == 0, time.Duration(rng.IntN(20))*time.Millisecond
					build = func(seq int64) ([]byte, error) {
						if never {
							stuck(seq)
						}
						time.Sleep(sleep)
						return fmt.Appendf(nil, "%s %d", id, seq), nil
					}
				}
				seq, err := s.EnqueueEvent(ctx, "r", build)
				cancel()
				got.record(id, seq, err)
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil && !errors.Is(err, outbox.ErrBuilderStuck) {
		t.Fatalf("Close: %v", err)
	}
	s2, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	t.Logf("%d of %d calls stored", got.check(t, storedByID(t, s2)), got.len())
}
