// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

// follower is FollowStream running on the stream EVENTS in the background.
type follower struct {
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// follow starts FollowStream; the test's end stops it.
func follow(t *testing.T, js njs.JetStream, in *inbox.Inbox, h inbox.Handler, opts ...jetstream.ConsumeOption) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- jetstream.FollowStream(ctx, js, "EVENTS", in, h, opts...) }()
	t.Cleanup(func() { f.stop() })
	return f
}

// stop cancels FollowStream's context and returns what it returned.
func (f *follower) stop() error {
	f.cancel()
	f.wait(time.Hour)
	return f.err
}

// wait waits up to d for FollowStream to return by itself.
func (f *follower) wait(d time.Duration) (error, bool) {
	if !f.ended {
		select {
		case f.err = <-f.done:
			f.ended = true
		case <-time.After(d):
		}
	}
	return f.err, f.ended
}

// waitApplied waits until the consumer's table holds want, and fails the test after a minute.
func waitApplied(t *testing.T, in *inbox.Inbox, want map[string][]int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := applied(t, in)
		if cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied after a minute (-want +got):\n%s", cmp.Diff(want, got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFollowStreamAppliesWhatComesUntilItsContextEnds(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithPollInterval(50*time.Millisecond))
	publishRun(t, js, "a", 1, 3)
	f := follow(t, js, in, insertHandler)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 3)})
	publishRun(t, js, "a", 4, 6)
	publishRun(t, js, "b", 1, 2)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 6), "b": seqs(1, 2)})
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v, want context.Canceled", err)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 8 {
		t.Errorf("position %v, want 8", p)
	}
}

func TestAServerRestartCostsLatencyNotLines(t *testing.T) {
	ns, js, in := consumeSetup(t, inbox.WithPollInterval(50*time.Millisecond), inbox.WithBatchLines(4))
	publishRun(t, js, "a", 1, 20)
	f := follow(t, js, in, insertHandler)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 20)})
	for round := range 2 {
		ns.stop()
		time.Sleep(100 * time.Millisecond)
		ns.start()
		from := int64(21 + 20*round)
		publishWhenUp(t, js, "a", from, from+19)
		waitApplied(t, in, map[string][]int64{"a": seqs(1, from+19)})
	}
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v, want context.Canceled", err)
	}
}

// publishWhenUp publishes run's lines from..to, retrying each while the client reconnects.
func publishWhenUp(t *testing.T, js njs.JetStream, run string, from, to int64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		for deadline := time.Now().Add(30 * time.Second); ; {
			// A publication in flight when the connection drops is never answered: wait for it
			// briefly, and send it again with its Msg-Id, which the stream deduplicates.
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, err := js.Publish(ctx, "outbox."+jetstream.Token(run), jline(run, seq, "x"),
				njs.WithMsgID(jetstream.MsgID(run, seq)))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish seq %d: %v", seq, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestAConnectionDropCostsLatencyNotLines(t *testing.T) {
	ns, js, in := consumeSetup(t, inbox.WithPollInterval(50*time.Millisecond), inbox.WithBatchLines(3))
	f := follow(t, js, in, insertHandler)
	for i := int64(0); i < 4; i++ {
		publishWhenUp(t, js, "a", 10*i+1, 10*i+10)
		waitApplied(t, in, map[string][]int64{"a": seqs(1, 10*i+10)})
		id, err := js.Conn().GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.srv.DisconnectClientByID(id); err != nil {
			t.Fatal(err)
		}
	}
	publishWhenUp(t, js, "a", 41, 45)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 45)})
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v, want context.Canceled", err)
	}
}

func TestFollowStreamReadsTheStreamAgainAfterARelease(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithPollInterval(20*time.Millisecond))
	publishRun(t, js, "a", 1, 3)
	var refuse atomic.Bool
	refuse.Store(true)
	f := follow(t, js, in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 2 && refuse.Load() {
			return fmt.Errorf("%w: not configured yet", inbox.ErrQuarantine)
		}
		return insertHandler(ctx, tx, ev)
	})
	waitPosition(t, in, 3)
	if q, _ := in.Quarantined(ctx); len(q) != 1 {
		t.Fatalf("quarantines %+v, want a's", q)
	}
	refuse.Store(false)
	if err := in.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// No new message comes: the follower sees the rewound position while it waits, and reads the
	// stream again from its start.
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 3)})
	waitPosition(t, in, 3)
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v", err)
	}
}

func waitPosition(t *testing.T, in *inbox.Inbox, seq uint64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if p := streamPosition(t, in); p != nil && p.Seq == seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("position %v after a minute, want %d", streamPosition(t, in), seq)
		}
	}
}

func TestAPurgeWhileFollowingStopsWithARetentionGap(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithBatchLines(1))
	publishRun(t, js, "a", 1, 20)
	st, _ := js.Stream(ctx, "EVENTS")
	block, purged := make(chan struct{}), make(chan struct{})
	f := follow(t, js, in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 2 {
			close(block)
			<-purged
		}
		return insertHandler(ctx, tx, ev)
	})
	<-block
	if err := st.Purge(ctx, njs.WithPurgeSequence(15)); err != nil {
		t.Fatal(err)
	}
	close(purged)
	// The consumer may have held a few messages past seq 2 before the purge; it can never have 15
	// without a hole before it that the stream's first sequence says was removed.
	err, ended := f.wait(time.Minute)
	if !ended {
		t.Fatal("FollowStream still running a minute after the purge")
	}
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) || gap.FirstSeq != 15 || !strings.Contains(err.Error(), "15") {
		t.Fatalf("FollowStream: %v, want a retention gap at first sequence 15", err)
	}
	got := applied(t, in)["a"]
	if want := seqs(1, int64(gap.Position)); !cmp.Equal(want, got) {
		t.Errorf("applied %v, want 1..%d: everything up to the position named, nothing past it", got, gap.Position)
	}
}

func TestAConsumerResetWhileTheSourceIsBusyKeepsStreamOrder(t *testing.T) {
	// The ordered consumer resets after a reconnect; its old delivery may still be waiting for room
	// while the new one delivers: the new one's first message must not pass it.
	ctx := context.Background()
	ns, js, in := consumeSetup(t, inbox.WithBatchLines(2), inbox.WithPollInterval(50*time.Millisecond))
	publishRun(t, js, "a", 1, 60)
	f := follow(t, js, in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		time.Sleep(10 * time.Millisecond) // a slow handler: the consumer's deliveries wait for room
		return insertHandler(ctx, tx, ev)
	})
	for range 4 {
		time.Sleep(120 * time.Millisecond)
		id, err := js.Conn().GetClientID()
		if err == nil {
			ns.srv.DisconnectClientByID(id)
		}
	}
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 60)})
	if q, _ := in.Quarantined(ctx); len(q) != 0 {
		t.Errorf("quarantines %+v", q)
	}
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v", err)
	}
}

func TestFollowStreamWaitsForAStreamThatDoesNotExistYet(t *testing.T) {
	ns := startServer(t)
	js := ns.connect(t)
	in := openInbox(t, filepath.Join(t.TempDir(), "platform.db"), inbox.WithPollInterval(50*time.Millisecond))
	f := follow(t, js, in, insertHandler)
	// No stream yet: the follower must still be waiting, not gone with ErrStreamNotFound. Looking
	// for it several times is what the poll interval makes it do meanwhile.
	deadline := time.Now().Add(time.Minute)
	for calls := 0; calls < 5 && time.Now().Before(deadline); calls++ {
		if err, ended := f.wait(100 * time.Millisecond); ended {
			t.Fatalf("FollowStream returned %v before the stream existed", err)
		}
	}
	stream(t, js, time.Minute, atomicBatches)
	publishRun(t, js, "a", 1, 3)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 3)})
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v, want context.Canceled", err)
	}
}

func TestFollowStreamWaitingForAMissingStreamEndsWithItsContext(t *testing.T) {
	ns := startServer(t)
	js := ns.connect(t)
	in := openInbox(t, filepath.Join(t.TempDir(), "platform.db"), inbox.WithPollInterval(50*time.Millisecond))
	f := follow(t, js, in, insertHandler)
	if err, ended := f.wait(300 * time.Millisecond); ended {
		t.Fatalf("FollowStream returned %v before the stream existed", err)
	}
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream returned %v, want context.Canceled", err)
	}
	if srcs, err := in.Sources(context.Background()); err != nil || len(srcs) != 0 {
		t.Errorf("sources %+v, %v: want none stored", srcs, err)
	}
}

func TestApplyStreamBesideFollowStreamOnOneSourceAppliesEachLineOnceAndTheFollowerGoesOn(t *testing.T) {
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

func TestClosingTheInboxEndsFollowStreamWithErrClosed(t *testing.T) {
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

func TestAStreamDeletedAndCreatedAgainWhileFollowingEndsTheFollower(t *testing.T) {
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
