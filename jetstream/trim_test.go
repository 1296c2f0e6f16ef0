// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

func trim(t *testing.T, js njs.JetStream, opts ...jetstream.TrimOption) jetstream.TrimReport {
	t.Helper()
	rep, err := jetstream.Trim(context.Background(), js, "EVENTS", opts...)
	if err != nil {
		t.Fatalf("Trim: %v", err)
	}
	return rep
}

func streamState(t *testing.T, js njs.JetStream) njs.StreamState {
	t.Helper()
	st, err := js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State
}

func TestTrimRemovesOnlyWhatEveryRegisteredReaderApplied(t *testing.T) {
	_, js, fast := consumeSetup(t, inbox.WithReaderName("fast"))
	slow := openInbox(t, filepath.Join(t.TempDir(), "slow.db"), inbox.WithReaderName("slow"))
	publishRun(t, js, "a", 1, 5) // stream sequences 1..5
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", slow, insertHandler); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "b", 1, 5) // 6..10
	applyStream(t, js, fast)
	rep := trim(t, js, jetstream.WithKeep(0))
	if rep.Floor != 6 || rep.Below != 6 || rep.Purged != 5 {
		t.Errorf("report %+v: want floor 6, below 6, 5 removed", rep)
	}
	if st := streamState(t, js); st.FirstSeq != 6 || st.Msgs != 5 {
		t.Errorf("stream first %d, %d messages: want 6 and 5", st.FirstSeq, st.Msgs)
	}
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", slow, insertHandler); err != nil {
		t.Fatalf("the slow reader after the trim: %v", err)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 5), "b": seqs(1, 5)}, applied(t, slow)); diff != "" {
		t.Errorf("slow reader's effects (-want +got):\n%s", diff)
	}
}

func TestTrimRemovesNothingWithoutARegisteredReader(t *testing.T) {
	_, js, _ := consumeSetup(t)
	publishRun(t, js, "a", 1, 5)
	if rep := trim(t, js, jetstream.WithKeep(0)); rep.Purged != 0 || rep.Floor != 0 {
		t.Errorf("report %+v: want nothing removed", rep)
	}
	if st := streamState(t, js); st.Msgs != 5 {
		t.Errorf("%d messages, want 5", st.Msgs)
	}
}

func TestTrimKeepsWhatIsYoungerThanTheKeepDuration(t *testing.T) {
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 5)
	applyStream(t, js, in)
	if rep := trim(t, js, jetstream.WithKeep(time.Hour)); rep.Purged != 0 || rep.Young != 1 {
		t.Errorf("report %+v: want nothing removed, the first young message 1", rep)
	}
}

func TestTheSinkGoesOnAfterTrimRemovedEveryLineOfItsRunAndTakesARedeliveryOfThemForHeld(t *testing.T) {
	_, js, in := consumeSetup(t)
	s := sink(t, js)
	ctx := context.Background()
	if err := s.Append(ctx, "run1", lines("run1", 1, 3, "x")); err != nil {
		t.Fatal(err)
	}
	applyStream(t, js, in)
	if rep := trim(t, js, jetstream.WithKeep(0)); rep.Purged != 3 {
		t.Fatalf("report %+v: want the run's 3 lines removed", rep)
	}
	// The sink that placed them, and a new one (a relay started again), go on after them.
	if err := s.Append(ctx, "run1", lines("run1", 4, 4, "x")); err != nil {
		t.Fatalf("append after the trim: %v", err)
	}
	fresh := sink(t, js)
	if err := fresh.Append(ctx, "run1", lines("run1", 2, 5, "x")); err != nil {
		t.Fatalf("a re-delivery of trimmed lines with the next: %v", err)
	}
	applyStream(t, js, in)
	if diff := cmp.Diff(map[string][]int64{"run1": seqs(1, 5)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	// A line past what was trimmed and never placed is still a gap.
	trim(t, js, jetstream.WithKeep(0))
	if err := sink(t, js).Append(ctx, "run1", lines("run1", 7, 7, "x")); !errors.Is(err, jetstream.ErrGap) {
		t.Errorf("append of seq 7 after 5: %v, want ErrGap", err)
	}
}

func TestTheCapRemovesPastALaggingReaderWhichStopsWithARetentionGap(t *testing.T) {
	_, js, fast := consumeSetup(t, inbox.WithReaderName("fast"))
	slow := openInbox(t, filepath.Join(t.TempDir(), "slow.db"), inbox.WithReaderName("slow"))
	publishRun(t, js, "a", 1, 3)
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", slow, insertHandler); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 4, 40)
	publishRun(t, js, "b", 1, 10)
	applyStream(t, js, fast)
	before := streamState(t, js)
	var logs bytes.Buffer
	capBytes := before.Bytes / 4
	rep := trim(t, js, jetstream.WithKeep(time.Hour), jetstream.WithMaxBytes(capBytes),
		jetstream.WithTrimLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if rep.Capped == 0 || rep.BytesAfter > capBytes {
		t.Fatalf("report %+v: want the cap to act and the stream within %d bytes", rep, capBytes)
	}
	if len(rep.LeftBehind) != 1 || rep.LeftBehind[0].Name != "slow" {
		t.Errorf("left behind %+v, want the slow reader", rep.LeftBehind)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "slow") {
		t.Errorf("log %q: want an error naming the slow reader", logs.String())
	}
	_, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", slow, insertHandler)
	var gap *jetstream.RetentionGapError
	if !errors.Is(err, inbox.ErrRetentionGap) || !errors.As(err, &gap) || gap.Position != 3 {
		t.Fatalf("the slow reader: %v, want a retention gap after position 3", err)
	}
	if got := applied(t, slow); !slices.Equal(got["a"], seqs(1, 3)) || len(got["b"]) != 0 {
		t.Errorf("slow reader's effects %v: want a 1..3 only", got)
	}
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", fast, insertHandler); err != nil {
		t.Errorf("the reader that had applied everything: %v", err)
	}
}

func TestTheCapsMarkStopsAReaderEvenWhileOlderMessagesOutsideItsFilterRemain(t *testing.T) {
	js := startServer(t).connect(t)
	if _, err := js.CreateStream(context.Background(), njs.StreamConfig{Name: "EVENTS", Subjects: []string{"outbox.>", "other.>"},
		Storage: njs.FileStorage, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	slow := openInbox(t, filepath.Join(t.TempDir(), "slow.db"), inbox.WithReaderName("slow"))
	// A message outside the filter, older than the ones the cap removes, stays: the stream's first
	// sequence does not move past the reader, the cap's mark does.
	if _, err := js.Publish(context.Background(), "other.x", []byte("not a line")); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 1, 3)
	applyStream(t, js, slow)
	publishRun(t, js, "a", 4, 30)
	rep := trim(t, js, jetstream.WithKeep(0), jetstream.WithMaxBytes(streamState(t, js).Bytes/3))
	if rep.Capped == 0 {
		t.Fatalf("report %+v: want the cap to act", rep)
	}
	if st := streamState(t, js); st.FirstSeq != 1 {
		t.Fatalf("first sequence %d, want 1 (the message outside the filter)", st.FirstSeq)
	}
	_, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", slow, insertHandler)
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) || gap.Position != 4 || gap.FirstSeq != rep.Capped || !gap.Capped ||
		!strings.Contains(err.Error(), "the cap of its trim removed every line below") {
		t.Fatalf("ApplyStream: %v, want a retention gap after 4 up to the mark %d", err, rep.Capped)
	}
}

func TestTwoFollowersAndASinkLoseNothingWhileTrimRunsBesideThem(t *testing.T) {
	_, js, one := consumeSetup(t, inbox.WithReaderName("one"), inbox.WithPollInterval(20*time.Millisecond))
	two := openInbox(t, filepath.Join(t.TempDir(), "two.db"), inbox.WithReaderName("two"), inbox.WithPollInterval(20*time.Millisecond))
	follow(t, js, one, insertHandler)
	s := sink(t, js)
	ctx := context.Background()
	stopTrim := make(chan struct{})
	trimDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopTrim:
				trimDone <- nil
				return
			default:
			}
			if _, err := jetstream.Trim(ctx, js, "EVENTS", jetstream.WithKeep(0)); err != nil {
				trimDone <- err
				return
			}
		}
	}()
	want := map[string][]int64{}
	var f2 *follower
	for i, run := range []string{"r1", "r2", "r3", "r4"} {
		for from := int64(1); from <= 40; from += 10 {
			if err := s.Append(ctx, run, lines(run, from, from+9, "x")); err != nil {
				t.Fatalf("append %s %d: %v", run, from, err)
			}
		}
		want[run] = seqs(1, 40)
		if i == 1 {
			// The second reader starts late: it registered nothing before, so only what the first
			// applied and Trim saw no other reader for may be gone; it reads what is left after
			// registering, and from then on nothing it has not applied goes.
			f2 = follow(t, js, two, insertHandler)
			waitRegistered(t, js, "two")
		}
	}
	waitApplied(t, one, want)
	close(stopTrim)
	if err := <-trimDone; err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if err, ended := f2.wait(0); ended {
		t.Fatalf("the second follower ended: %v", err)
	}
	// What the second reader holds of each run ends at 40, without a gap after its first line.
	deadline := time.Now().Add(time.Minute)
	for {
		got := applied(t, two)
		ok := len(got) >= 2
		for _, run := range []string{"r3", "r4"} {
			ok = ok && slices.Equal(got[run], seqs(1, 40))
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second reader's effects after a minute: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The sink goes on for every run after the trims, from a fresh start too.
	for _, run := range []string{"r1", "r4"} {
		if err := sink(t, js).Append(ctx, run, lines(run, 31, 41, "x")); err != nil {
			t.Errorf("re-delivery and next line of %s after the trims: %v", run, err)
		}
	}
}

// A reader without a position that starts while a trim runs, after the trim first looked at the
// readers and before it removes anything, loses nothing it begins to read: the trim announces what
// it removes before it looks again, and the reader reads that announcement and the stream's first
// sequence only after it wrote its key. Started before the announcement, the reader's key is kept
// by the trim's second look and it reads everything; started after, it starts above what goes.
// The reader commits its first line and waits there while the trim completes.
func TestAReaderStartedBesideARunningTrimmerIsProtectedFromItsFirstRead(t *testing.T) {
	for _, c := range []struct {
		window string
		want   map[string][]int64 // what the second reader applies
	}{
		{"looked", map[string][]int64{"a": seqs(1, 5), "b": seqs(1, 5), "c": seqs(1, 5)}},
		{"announced", map[string][]int64{"c": seqs(1, 5)}},
		{"recorded", map[string][]int64{"c": seqs(1, 5)}},
	} {
		t.Run(c.window, func(t *testing.T) {
			_, js, one := consumeSetup(t, inbox.WithReaderName("one"))
			two := openInbox(t, filepath.Join(t.TempDir(), "two.db"), inbox.WithReaderName("two"), inbox.WithBatchLines(1))
			publishRun(t, js, "a", 1, 5) // stream sequences 1..5
			publishRun(t, js, "b", 1, 5) // 6..10
			applyStream(t, js, one)
			publishRun(t, js, "c", 1, 5) // 11..15, which the first reader has not applied

			var started, committed sync.Once
			readerDone := make(chan error, 1)
			firstCommit, resume := make(chan struct{}), make(chan struct{})
			jetstream.SetAfterStreamCommit(func(string, uint64) {
				committed.Do(func() { close(firstCommit); <-resume })
			})
			jetstream.SetTrimStep(func(step string) error {
				if step == c.window {
					started.Do(func() {
						go func() {
							_, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", two, insertHandler)
							readerDone <- err
						}()
						select {
						case <-firstCommit:
						case err := <-readerDone:
							readerDone <- err
						}
					})
				}
				return nil
			})
			t.Cleanup(func() { jetstream.SetTrimStep(nil); jetstream.SetAfterStreamCommit(nil) })
			rep, err := jetstream.Trim(context.Background(), js, "EVENTS", jetstream.WithKeep(0))
			jetstream.SetTrimStep(nil)
			close(resume)
			if err != nil {
				t.Fatalf("Trim: %v", err)
			}
			ran := false
			started.Do(func() { ran = true })
			if ran {
				t.Fatalf("the trim never reached its step %q: report %+v", c.window, rep)
			}
			if err := <-readerDone; err != nil {
				t.Fatalf("the reader started beside the trim: %v (trim report %+v)", err, rep)
			}
			if diff := cmp.Diff(c.want, applied(t, two)); diff != "" {
				t.Errorf("the second reader (-want +got):\n%s", diff)
			}
			// Nothing either reader has not applied went: both read on to the stream's end.
			publishRun(t, js, "c", 6, 6)
			applyStream(t, js, one)
			applyStream(t, js, two)
			if got := applied(t, two)["c"]; !slices.Equal(got, seqs(1, 6)) {
				t.Errorf("the second reader holds c %v, want 1..6", got)
			}
		})
	}
}

// What a trim of one prefix's lines announces it removes is that prefix's: a new reader of another
// prefix in the same stream, whose lines the trim leaves, reads them from the first.
func TestATrimOfOnePrefixDoesNotMoveWhereANewReaderOfAnotherStarts(t *testing.T) {
	ctx := context.Background()
	js := startServer(t).connect(t)
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "EVENTS", Subjects: []string{"outbox.>", "tenant.>"},
		Storage: njs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ { // stream sequences 1..3
		if _, err := js.Publish(ctx, "tenant."+jetstream.Token("t"), jline("t", seq, "x")); err != nil {
			t.Fatal(err)
		}
	}
	publishRun(t, js, "a", 1, 3) // 4..6
	one := openInbox(t, filepath.Join(t.TempDir(), "one.db"), inbox.WithReaderName("one"))
	applyStream(t, js, one)
	if rep := trim(t, js, jetstream.WithKeep(0)); rep.Below != 7 || rep.Purged != 3 {
		t.Fatalf("report %+v: want the outbox lines below 7 removed", rep)
	}
	two := openInbox(t, filepath.Join(t.TempDir(), "two.db"), inbox.WithReaderName("two"))
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", two, insertHandler, jetstream.WithSubjectPrefix("tenant"))
	if err != nil || rep.Applied != 3 {
		t.Fatalf("the tenant reader: %+v, %v: want its 3 lines", rep, err)
	}
}

// waitRegistered waits until the reader name is registered with EVENTS, and fails the test after a
// minute. A read that fails is tried again: a loaded cluster may not answer within a js whose
// default timeout is short.
func waitRegistered(t *testing.T, js njs.JetStream, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rs, err := jetstream.Readers(context.Background(), js, "EVENTS")
		if _, ok := readerSeqs(t, rs)[name]; ok && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reader %s not registered after a minute (%v)", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestATrimStoppedAtAnyStepLeavesTheSinkAndTheReadersWhole(t *testing.T) {
	for _, at := range []string{"announced", "recorded", "purged", "capmark"} {
		t.Run(at, func(t *testing.T) {
			_, js, fast := consumeSetup(t, inbox.WithReaderName("fast"))
			slow := openInbox(t, filepath.Join(t.TempDir(), "slow.db"), inbox.WithReaderName("slow"))
			s := sink(t, js)
			ctx := context.Background()
			for _, run := range []string{"r1", "r2"} {
				if err := s.Append(ctx, run, lines(run, 1, 5, "x")); err != nil {
					t.Fatal(err)
				}
			}
			applyStream(t, js, fast)
			if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", slow, insertHandler); err != nil {
				t.Fatal(err)
			}
			for _, run := range []string{"r1", "r2"} {
				if err := s.Append(ctx, run, lines(run, 6, 8, "x")); err != nil {
					t.Fatal(err)
				}
			}
			applyStream(t, js, fast)
			killed := errors.New("killed")
			jetstream.SetTrimStep(func(step string) error {
				if step == at {
					return killed
				}
				return nil
			})
			opts := []jetstream.TrimOption{jetstream.WithKeep(0)}
			if at == "capmark" {
				opts = append(opts, jetstream.WithMaxBytes(1))
			}
			_, err := jetstream.Trim(ctx, js, "EVENTS", opts...)
			jetstream.SetTrimStep(nil)
			if !errors.Is(err, killed) {
				t.Fatalf("Trim: %v, want it stopped at %s", err, at)
			}
			// A relay started again re-delivers the last batch of each run and goes on.
			for _, run := range []string{"r1", "r2"} {
				if err := sink(t, js).Append(ctx, run, lines(run, 4, 10, "x")); err != nil {
					t.Fatalf("re-delivery of %s after a trim stopped at %s: %v", run, at, err)
				}
			}
			want := map[string][]int64{"r1": seqs(1, 10), "r2": seqs(1, 10)}
			applyStream(t, js, fast)
			if diff := cmp.Diff(want, applied(t, fast)); diff != "" {
				t.Errorf("fast reader (-want +got):\n%s", diff)
			}
			_, err = jetstream.ApplyStream(ctx, js, "EVENTS", slow, insertHandler)
			if at == "capmark" {
				// The mark is down: the reader behind it stops, though nothing was removed yet.
				if !errors.Is(err, jetstream.ErrRetentionGap) {
					t.Errorf("slow reader after the cap's mark: %v, want a retention gap", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("slow reader: %v", err)
			}
			if diff := cmp.Diff(want, applied(t, slow)); diff != "" {
				t.Errorf("slow reader (-want +got):\n%s", diff)
			}
			// The next trim completes what the stopped one began.
			trim(t, js, jetstream.WithKeep(0))
			if st := streamState(t, js); st.Msgs != 0 {
				t.Errorf("%d messages after the next trim, want 0", st.Msgs)
			}
		})
	}
}
