// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

func TestAHandlerCancellingTheContextMidStreamCommitsNothingOfItsBatch(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithBatchLines(4))
	publishRun(t, js, "a", 1, 10)
	ctx, cancel := context.WithCancel(context.Background())
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, func(c context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 6 {
			cancel()
		}
		return insertHandler(c, tx, ev)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%+v %v", rep, err)
	}
	if rep != (inbox.Report{Applied: 4}) {
		t.Fatalf("report %+v, want the first batch", rep)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 4 {
		t.Fatalf("position %v", p)
	}
	if r := applyStream(t, js, in); r != (inbox.Report{Applied: 6}) {
		t.Fatalf("%+v", r)
	}
}

func TestABatchHookThatPanicsInApplyStreamLeavesNoConsumerAndTheSourceGoesOn(t *testing.T) {
	ctx := context.Background()
	panicking := true
	_, js, in := consumeSetup(t, inbox.WithBatchLines(2), inbox.WithBatchHook(func(string, inbox.Report) {
		if panicking {
			panic("hook")
		}
	}))
	publishRun(t, js, "a", 1, 5)
	func() {
		defer func() {
			if r := recover(); r != "hook" {
				t.Fatalf("recovered %v", r)
			}
		}()
		jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
		t.Fatal("no panic")
	}()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().State.Consumers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers left on the server after the panic", s.CachedInfo().State.Consumers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	panicking = false
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 3}) {
		t.Fatalf("%+v", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 5)}, applied(t, in)); diff != "" {
		t.Fatal(diff)
	}
}

func TestAHandlerCallingApplyStreamWithItsContextIsErrInHandler(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 2)
	var inner error
	_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, func(c context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, inner = jetstream.ApplyStream(c, js, "EVENTS", in, insertHandler)
		return insertHandler(c, tx, ev)
	})
	if err != nil || !errors.Is(inner, inbox.ErrInHandler) {
		t.Fatalf("outer %v, inner %v", err, inner)
	}
}

func TestAContextCancelledAtAnyLineOrBatchLeavesAPositionThatLosesAndRepeatsNothing(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithBatchLines(3), inbox.WithBatchHook(func(string, inbox.Report) {
		if hookCancel != nil {
			hookCancel()
		}
	}))
	publishRun(t, js, "a", 1, 10)
	publishRun(t, js, "b", 1, 10)
	for k := 1; k <= 8; k++ {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		h := func(c context.Context, tx *sql.Tx, ev inbox.Event) error {
			n++
			if n == k {
				cancel()
			}
			return insertHandler(c, tx, ev)
		}
		if k%2 == 0 {
			hookCancel = cancel // and the hook cancels after the first batch
		}
		_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, h)
		hookCancel = nil
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("k=%d: %v", k, err)
		}
		// what is applied is a prefix of the stream up to the position: nothing past it, nothing missing
		got := applied(t, in)
		pos := streamPosition(t, in)
		var seq uint64
		if pos != nil {
			seq = pos.Seq
		}
		want := map[string][]int64{}
		for s := uint64(1); s <= seq; s++ {
			run, rs := "a", int64(s)
			if s > 10 {
				run, rs = "b", int64(s-10)
			}
			want[run] = append(want[run], rs)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("k=%d position %d (-want +got):\n%s", k, seq, diff)
		}
	}
	hookCancel = nil
	applyStream(t, js, in)
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 10), "b": seqs(1, 10)}, applied(t, in)); diff != "" {
		t.Fatal(diff)
	}
}

// hookCancel is what the batch hook of the test above cancels, when set; the test runs alone.
var hookCancel context.CancelFunc
