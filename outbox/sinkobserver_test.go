// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// appends records what a SinkObserver hears.
type appends struct {
	mu  sync.Mutex
	all []outbox.SinkAppend
}

func (a *appends) ObserveAppend(x outbox.SinkAppend) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.all = append(a.all, x)
}

// A relay given a SinkObserver tells it of every append, failed ones too, with the run, the batch's
// lines and bytes and the sink's error, so that an exporter outside the module can measure the sink.
func TestASinkObserverHearsOfEveryAppendWithItsLinesBytesAndError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 10; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	stored := outboxtest.AllLines(t, s, "r")
	sink := outboxtest.NewMemSink()
	sink.SetFailing(true)
	obs := &appends{}
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchSize(4), outbox.WithFlushAttempts(1), outbox.WithSinkObserver(obs))
	if err := relay.Flush(ctx); !errors.Is(err, outboxtest.ErrSinkDown) {
		t.Fatalf("Flush with a failing sink: %v", err)
	}
	sink.SetFailing(false)
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	bytesOf := func(from, to int) int {
		n := 0
		for _, l := range stored[from:to] {
			n += len(l.Line)
		}
		return n
	}
	type seen struct {
		Run          string
		Lines, Bytes int
		Failed       bool
	}
	want := []seen{{"r", 4, bytesOf(0, 4), true}, {"r", 4, bytesOf(0, 4), false}, {"r", 4, bytesOf(4, 8), false}, {"r", 2, bytesOf(8, 10), false}}
	var got []seen
	for _, a := range obs.all {
		if a.Elapsed < 0 {
			t.Errorf("elapsed %v", a.Elapsed)
		}
		if a.Err != nil && !errors.Is(a.Err, outboxtest.ErrSinkDown) {
			t.Errorf("the observer heard %v", a.Err)
		}
		got = append(got, seen{a.RunID, a.Lines, a.Bytes, a.Err != nil})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("appends heard (-want +got):\n%s", diff)
	}
	if _, err := outbox.NewRelay(s, sink, "r", outbox.WithSinkObserver(nil)); err == nil {
		t.Error("NewRelay took a nil sink observer")
	}
}

// Run reads one run's figures, the same OpenRuns gives while it lists the run, and still after its
// lines are projected and forgotten and it has left that list; zeros for a run the book never held.
func TestRunReadsOneRunsFiguresAfterItsLinesAreForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		outboxtest.MustEnqueue(t, s, "r")
	}
	got, err := s.Run(ctx, "r")
	if err != nil || got.RunID != "r" || got.LastSeq != 3 || got.Pending != 3 || got.Lines != 3 || got.EnqueuedTotal != 3 {
		t.Fatalf("Run before projecting = %+v, %v", got, err)
	}
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for r, err := range s.OpenRuns(ctx) {
		if err != nil || r.RunID == "r" {
			t.Fatalf("OpenRuns still lists %+v, %v", r, err)
		}
	}
	got, err = s.Run(ctx, "r")
	if err != nil || got.LastSeq != 3 || got.Projected != 3 || got.Pending != 0 || got.Lines != 0 || got.ProjectedTotal != 3 {
		t.Fatalf("Run after projecting = %+v, %v", got, err)
	}
	if got, err := s.Run(ctx, "never"); err != nil || got.RunID != "never" || got.LastSeq != 0 || got.Lines != 0 {
		t.Fatalf("Run of a run never held = %+v, %v", got, err)
	}
	if _, err := s.Run(ctx, ""); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Fatalf("Run of an empty id: %v", err)
	}
}
