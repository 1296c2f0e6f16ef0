// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
)

func TestAttackAStreamThatDoesNotCaptureThePrefixIsRefusedAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "OTHER", Subjects: []string{"foo.>"}, Storage: njs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "foo.a", jline("a", 1, "x")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stream   string
		opts     []jetstream.ConsumeOption
		settings bool
	}{
		{"OTHER", nil, true},
		{"EVENTS", []jetstream.ConsumeOption{jetstream.WithSubjectPrefix("nope")}, true},
		{"EVENTS", []jetstream.ConsumeOption{jetstream.WithSubjectPrefix("bad prefix")}, false},
		{"MISSING", nil, false},
	} {
		rep, err := jetstream.ApplyStream(ctx, js, c.stream, in, insertHandler, c.opts...)
		t.Logf("%s %d opts: %+v %v", c.stream, len(c.opts), rep, err)
		if err == nil || rep != (inbox.Report{}) {
			t.Errorf("stream %s with %d options: %+v, %v", c.stream, len(c.opts), rep, err)
		}
		if c.settings && !errors.Is(err, jetstream.ErrStreamSettings) {
			t.Errorf("stream %s: %v, want ErrStreamSettings", c.stream, err)
		}
	}
	// A bound for a FollowStream that would not stop, not the refusal's: on a loaded machine the
	// refusal may take longer than a short bound, which would then be what the test saw.
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := jetstream.FollowStream(fctx, js, "OTHER", in, insertHandler); !errors.Is(err, jetstream.ErrStreamSettings) {
		t.Errorf("FollowStream on OTHER: %v, want ErrStreamSettings at once", err)
	}
	srcs, err := in.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 0 {
		t.Fatalf("refused calls left positions: %+v", srcs)
	}
}

func TestAttackTwoStreamsCarryingTheSameLinesApplyEachOnce(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	if _, err := jetstream.CreateStream(ctx, js, "COPY", jetstream.WithSubjectPrefix("copy")); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 1, 5)
	for s := int64(1); s <= 7; s++ {
		if _, err := js.Publish(ctx, "copy."+jetstream.Token("a"), jline("a", s, "x")); err != nil {
			t.Fatal(err)
		}
	}
	r1 := applyStream(t, js, in)
	r2, err := jetstream.ApplyStream(ctx, js, "COPY", in, insertHandler, jetstream.WithSubjectPrefix("copy"))
	if err != nil {
		t.Fatal(err)
	}
	if r1 != (inbox.Report{Applied: 5}) || r2 != (inbox.Report{Applied: 2, Duplicates: 5}) {
		t.Fatalf("%+v %+v", r1, r2)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 7)}, applied(t, in)); diff != "" {
		t.Fatal(diff)
	}
}

func TestAttackApplyStreamBesideFollowStreamOnOneSourceAppliesEachLineOnceAndTheFollowerGoesOn(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithBatchLines(3), inbox.WithPollInterval(20*time.Millisecond))
	f := follow(t, js, in, insertHandler)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 15; i++ {
			if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); err != nil && !errors.Is(err, inbox.ErrSourceMoved) {
				t.Errorf("ApplyStream: %v", err)
				return
			}
		}
	}()
	publishRun(t, js, "a", 1, 40)
	wg.Wait()
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 40)})
	if err, ended := f.wait(0); ended {
		t.Fatalf("the follower ended: %v", err)
	}
}

func TestAttackClosingTheInboxEndsFollowStreamWithErrClosed(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithPollInterval(20*time.Millisecond))
	publishRun(t, js, "a", 1, 3)
	f := follow(t, js, in, insertHandler)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 3)})
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	err, ended := f.wait(3 * time.Second)
	if !ended {
		t.Fatal("FollowStream went on after the inbox was closed")
	}
	if !errors.Is(err, inbox.ErrClosed) {
		t.Fatalf("FollowStream: %v, want ErrClosed", err)
	}
}

func TestAttackAStreamDeletedAndCreatedAgainWhileFollowingEndsTheFollower(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithPollInterval(20*time.Millisecond))
	publishRun(t, js, "a", 1, 3)
	f := follow(t, js, in, insertHandler)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 3)})
	if err := js.DeleteStream(ctx, "EVENTS"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	stream(t, js, time.Minute, atomicBatches)
	publishRun(t, js, "b", 1, 5)
	err, ended := f.wait(4 * time.Second)
	if !ended {
		got := applied(t, in)
		t.Fatalf("the follower goes on over a stream created again; applied %v", got)
	}
	t.Logf("FollowStream: %v", err)
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) && !errors.Is(err, njs.ErrStreamNotFound) {
		t.Fatalf("FollowStream: %v", err)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 3)}, applied(t, in)); diff != "" {
		t.Fatal(diff)
	}
}

func TestAttackAHandlerCancellingTheContextMidStreamCommitsNothingOfItsBatch(t *testing.T) {
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

func TestAttackAMirrorOfTheStreamIsReadThoughItHasNoSubjectsOfItsOwn(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 4)
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "MIRROR", Storage: njs.FileStorage,
		Mirror: &njs.StreamSource{Name: "EVENTS"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	for {
		s, err := js.Stream(ctx, "MIRROR")
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().State.Msgs == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mirror did not catch up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := jetstream.ApplyStream(ctx, js, "MIRROR", in, insertHandler)
	if err != nil || rep != (inbox.Report{Applied: 4}) {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestAttackAMessageOnASubjectNoSinkPublishesStopsTheSource(t *testing.T) {
	for _, c := range []struct {
		name, subject string
		data          []byte
	}{
		{"two tokens after the prefix", "outbox.x.b", jline("b", 1, "x")},
		{"a token that is not Token's", "outbox.b~zz", jline("b", 1, "x")},
		{"an upper-case escape", "outbox.a~2Eb", jline("a.b", 1, "x")},
		{"an empty payload", "outbox.b", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, js, in := consumeSetup(t)
			if _, err := js.Publish(ctx, c.subject, c.data); err != nil {
				t.Fatal(err)
			}
			rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
			if !errors.Is(err, journal.ErrMalformed) {
				t.Fatalf("ApplyStream: %+v, %v, want journal.ErrMalformed", rep, err)
			}
			if len(applied(t, in)) != 0 {
				t.Fatalf("applied %v", applied(t, in))
			}
		})
	}
}

func TestAttackABatchHookThatPanicsInApplyStreamLeavesNoConsumerAndTheSourceGoesOn(t *testing.T) {
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

func TestAttackAHandlerCallingApplyStreamWithItsContextIsErrInHandler(t *testing.T) {
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

func TestAttackAContextCancelledAtAnyLineOrBatchLeavesAPositionThatLosesAndRepeatsNothing(t *testing.T) {
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
