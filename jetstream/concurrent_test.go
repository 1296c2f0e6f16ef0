// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
)

// A batch of one run in flight (held here as long as the test likes) does not hold up another run's
// Append through the same sink, while an Append of the same run waits for it and gives up when its
// context ends.
func TestAnAppendDoesNotWaitForAnotherRunsBatchInFlight(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		js, s := setup(t, time.Minute, m)
		release, err := jetstream.HoldTurn(context.Background(), s, "a")
		if err != nil {
			t.Fatal(err)
		}
		// A ceiling, not a timing assertion: with one turn for the whole sink this Append waits for
		// the held one, which is never released in time.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Append(ctx, "b", lines("b", 1, 3, "x")); err != nil {
			t.Fatalf("run b's Append beside run a's batch in flight: %v", err)
		}
		short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancelShort()
		if err := s.Append(short, "a", lines("a", 1, 2, "x")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("run a's Append while its batch is in flight: %v, want the context's end", err)
		}
		release()
		if err := s.Append(ctx, "a", lines("a", 1, 2, "x")); err != nil {
			t.Fatal(err)
		}
		rep := verify(t, js)
		want := map[string]journal.RunReport{"a": {Last: 2, Lines: 2}, "b": {Last: 3, Lines: 3}}
		if diff := cmp.Diff(want, rep.Runs); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
		if n := jetstream.Turns(s); n != 0 {
			t.Errorf("the sink keeps %d turns with no Append under way, want 0", n)
		}
	})
}

// Relays of many runs appending through one sink at once: every run's lines are in the stream, in
// order, once each, and the sink keeps no state for runs nobody appends to any more.
func TestConcurrentAppendsOfManyRunsPlaceEachRunInOrder(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		js, s := setup(t, time.Minute, m)
		const runs, batches, per = 6, 5, 7
		var wg sync.WaitGroup
		errs := make(chan error, runs)
		for r := range runs {
			run := fmt.Sprintf("run-%d", r)
			wg.Go(func() {
				for b := range batches {
					from := int64(b*per + 1)
					if err := s.Append(context.Background(), run, lines(run, from, from+per-1, "x")); err != nil {
						errs <- fmt.Errorf("%s: %w", run, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		rep := verify(t, js)
		want := map[string]journal.RunReport{}
		for r := range runs {
			want[fmt.Sprintf("run-%d", r)] = journal.RunReport{Last: batches * per, Lines: batches * per}
		}
		if diff := cmp.Diff(want, rep.Runs); diff != "" || rep.Duplicates != 0 {
			t.Errorf("report (-want +got):\n%s\n%+v", diff, rep)
		}
		if n := jetstream.Turns(s); n != 0 {
			t.Errorf("the sink keeps %d turns with no Append under way, want 0", n)
		}
	})
}
