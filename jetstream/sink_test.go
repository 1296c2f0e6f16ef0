// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// natsServer is one in-process JetStream server on a loopback port, with its store in a temporary
// directory. Settings: file storage, the server's default sync interval (not sync always): the tests
// check ordering, deduplication and recovery, not power loss.
type natsServer struct {
	t    testing.TB
	dir  string
	port int
	srv  *server.Server
	opts func(*server.Options) // changes to the defaults, or nil
}

func startServer(t testing.TB) *natsServer { return startServerWith(t, nil) }

// startServerWith starts a server whose options opts changes (limits, for the tests past them).
func startServerWith(t testing.TB, opts func(*server.Options)) *natsServer {
	t.Helper()
	ns := &natsServer{t: t, dir: t.TempDir(), port: -1, opts: opts}
	ns.start()
	t.Cleanup(ns.stop)
	return ns
}

func (ns *natsServer) start() {
	ns.t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: ns.port, JetStream: true, StoreDir: ns.dir, NoLog: true, NoSigs: true}
	if ns.opts != nil {
		ns.opts(o)
	}
	srv, err := server.NewServer(o)
	if err != nil {
		ns.t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		ns.t.Fatal("nats server not ready")
	}
	ns.srv = srv
	ns.port = ns.portOf(srv) // the same port on a restart, so clients reconnect to it
}

func (ns *natsServer) portOf(srv *server.Server) int {
	var p int
	fmt.Sscanf(srv.ClientURL()[strings.LastIndex(srv.ClientURL(), ":")+1:], "%d", &p)
	return p
}

func (ns *natsServer) stop() {
	if ns.srv != nil {
		ns.srv.Shutdown()
		ns.srv.WaitForShutdown()
		ns.srv = nil
	}
}

func (ns *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", ns.port) }

// connect returns a JetStream context on a connection that reconnects for as long as the test runs.
func (ns *natsServer) connect(t testing.TB) njs.JetStream {
	t.Helper()
	nc, err := nats.Connect(ns.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// mode is the publishing path a test's stream makes the sink take.
type mode bool

const (
	atomicBatches mode = true
	oneAtATime    mode = false
)

// forModes runs a test against a stream with atomic publish and against one without.
func forModes(t *testing.T, test func(t *testing.T, m mode)) {
	t.Run("atomic batches", func(t *testing.T) { test(t, atomicBatches) })
	t.Run("one at a time", func(t *testing.T) { test(t, oneAtATime) })
}

// stream creates the stream EVENTS on outbox.> with the given duplicate window, through CreateStream
// for the atomic path, and without atomic publish (as before nats-server 2.12) for the other. File
// storage, one replica.
func stream(t testing.TB, js njs.JetStream, dupes time.Duration, m mode) {
	t.Helper()
	var err error
	if m == atomicBatches {
		_, err = jetstream.CreateStream(context.Background(), js, "EVENTS", jetstream.WithDuplicateWindow(dupes))
	} else {
		_, err = js.CreateStream(context.Background(), njs.StreamConfig{Name: "EVENTS", Subjects: []string{"outbox.>"},
			Storage: njs.FileStorage, Replicas: 1, Duplicates: dupes})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// setup starts a server (with its options changed by opts), creates the stream EVENTS with the
// duplicate window dupes in mode m, and returns a connection and a sink on it: where most tests of the
// sink start.
func setup(t testing.TB, dupes time.Duration, m mode, opts ...func(*server.Options)) (njs.JetStream, *jetstream.Sink) {
	t.Helper()
	js := startServerWith(t, func(o *server.Options) {
		for _, opt := range opts {
			opt(o)
		}
	}).connect(t)
	stream(t, js, dupes, m)
	return js, sink(t, js)
}

func sink(t testing.TB, js njs.JetStream, opts ...jetstream.Option) *jetstream.Sink {
	t.Helper()
	s, err := jetstream.NewSink(js, "EVENTS", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func lines(run string, from, to int64, kind string) []outbox.EventLine {
	var out []outbox.EventLine
	for seq := from; seq <= to; seq++ {
		out = append(out, outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":%q}`, run, seq, kind)})
	}
	return out
}

func verify(t testing.TB, js njs.JetStream) journal.Report {
	t.Helper()
	rep, err := jetstream.Verify(context.Background(), js, "EVENTS")
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

func TestLinesArePublishedInOrderPerRunAndVerifyLikeAFile(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		odd := "b.with*odd>chars"
		for _, b := range []struct {
			run   string
			lines []outbox.EventLine
		}{{"a", lines("a", 1, 3, "x")}, {odd, lines(odd, 1, 2, "x")}, {"a", lines("a", 4, 5, "x")}} {
			if err := s.Append(ctx, b.run, b.lines); err != nil {
				t.Fatal(err)
			}
		}
		rep := verify(t, js)
		want := map[string]journal.RunReport{"a": {Last: 5, Lines: 5}, odd: {Last: 2, Lines: 2}}
		if diff := cmp.Diff(want, rep.Runs); diff != "" || rep.Lines != 7 || rep.Duplicates != 0 {
			t.Errorf("report (-want +got):\n%s\n%+v", diff, rep)
		}
	})
}

func TestARedeliveryOfIdenticalBytesIsSuccessEvenAfterTheDedupeWindow(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, _ := setup(t, 100*time.Millisecond, m)
		first := lines("a", 1, 6, "x")
		if err := sink(t, js).Append(ctx, "a", first); err != nil {
			t.Fatal(err)
		}
		// Inside the window, from the same sink, and outside it, from a fresh one (a restarted relay that
		// never recorded the batch): both succeed and store nothing again.
		if err := sink(t, js).Append(ctx, "a", first[2:]); err != nil {
			t.Errorf("re-delivery inside the window: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
		s := sink(t, js)
		if err := s.Append(ctx, "a", append(first[3:], lines("a", 7, 8, "x")...)); err != nil {
			t.Errorf("re-delivery after the window, then new lines: %v", err)
		}
		if rep := verify(t, js); rep.Lines != 8 || rep.Duplicates != 0 || rep.Runs["a"].Last != 8 {
			t.Errorf("stream holds %+v, want 8 lines, no duplicate", rep)
		}
	})
}

func TestARedeliveryWithOtherBytesIsAConflictThatStopsTheRun(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, _ := setup(t, 100*time.Millisecond, m)
		if err := sink(t, js).Append(ctx, "a", lines("a", 1, 3, "x")); err != nil {
			t.Fatal(err)
		}
		for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
			time.Sleep(wait)
			// A batch of a re-delivered line with other bytes and a new line: nothing of it is placed.
			err := sink(t, js).Append(ctx, "a", append(lines("a", 2, 2, "other"), lines("a", 3, 4, "x")...))
			if !errors.Is(err, jetstream.ErrConflict) || !errors.Is(err, journal.ErrPayloadConflict) || !errors.Is(err, outbox.ErrSinkRefused) {
				t.Errorf("after %v: %v, want a conflict refusal", wait, err)
			}
		}
		if rep := verify(t, js); rep.Lines != 3 {
			t.Errorf("stream holds %d lines, want 3", rep.Lines)
		}
	})
}

func TestAGapIsRefusedAndAStaleSinkCannotCreateOne(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, a := setup(t, time.Minute, m)
		if err := a.Append(ctx, "r", lines("r", 1, 1, "x")); err != nil {
			t.Fatal(err)
		}
		err := a.Append(ctx, "r", lines("r", 3, 3, "x"))
		if !errors.Is(err, jetstream.ErrGap) || !errors.Is(err, journal.ErrStreamGap) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("seq 3 after 1: %v, want a gap refusal", err)
		}
		// Another sink places seq 2: a, whose memory says the run ends at 1, is corrected by the server's
		// expected-sequence check and places 3 after it.
		if err := sink(t, js).Append(ctx, "r", lines("r", 2, 2, "x")); err != nil {
			t.Fatal(err)
		}
		if err := a.Append(ctx, "r", lines("r", 3, 4, "x")); err != nil {
			t.Errorf("stale sink: %v", err)
		}
		if rep := verify(t, js); rep.Runs["r"].Last != 4 || rep.Lines != 4 {
			t.Errorf("stream: %+v", rep)
		}
	})
}

// TestTheBrokerRefusesWhatAStaleSinkWouldMisplace: past the duplicate window the Msg-Id no longer
// protects anything, and only the expected-last-subject-sequence check stands between a sink's stale
// memory and the stream.
func TestTheBrokerRefusesWhatAStaleSinkWouldMisplace(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, _ := setup(t, 100*time.Millisecond, m)
		// Each stale sink places seq 1 of its run, another sink then places seq 2, and after the duplicate
		// window the stale one sends seq 2 again, believing the run ends at 1. Published with "the
		// subject's last is my seq 1", it is refused by the server; the sink reads the subject back,
		// finds seq 2 there and compares bytes.
		for _, tc := range []struct {
			run, kind string
			conflict  bool
		}{{"same", "x", false}, {"other", "changed", true}} {
			stale := sink(t, js)
			if err := stale.Append(ctx, tc.run, lines(tc.run, 1, 1, "x")); err != nil {
				t.Fatal(err)
			}
			if err := sink(t, js).Append(ctx, tc.run, lines(tc.run, 2, 2, "x")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			err := stale.Append(ctx, tc.run, lines(tc.run, 2, 2, tc.kind))
			if tc.conflict && !errors.Is(err, jetstream.ErrConflict) {
				t.Errorf("%s: stale sink sending other bytes: %v, want ErrConflict", tc.run, err)
			}
			if !tc.conflict && err != nil {
				t.Errorf("%s: stale sink re-sending identical bytes: %v", tc.run, err)
			}
		}
		rep := verify(t, js)
		if rep.Duplicates != 0 || rep.Lines != 4 {
			t.Errorf("the stream took a stale sink's line: %+v", rep)
		}
	})
}

// TestAStaleSinkCannotPlaceABatchBehindAHole: the run's last line is deleted behind the sink's back,
// so the batch it sends next expects a subject sequence the stream no longer ends at. The broker
// refuses the whole batch, and the sink, reading the run back, refuses to place it after seq 1.
func TestAStaleSinkCannotPlaceABatchBehindAHole(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, 100*time.Millisecond, m)
		if err := s.Append(ctx, "r", lines("r", 1, 2, "x")); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(ctx, 2); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := s.Append(ctx, "r", lines("r", 3, 10, "x")); !errors.Is(err, jetstream.ErrGap) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("a batch after a deleted line: %v, want a gap refusal", err)
		}
		if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
			t.Errorf("the stream holds %d messages (%v), want 1: part of the batch went in", info.State.Msgs, err)
		}
	})
}

func TestVerifyFindsAGapPublishedAroundTheSink(t *testing.T) {
	ctx := context.Background()
	js, _ := setup(t, time.Minute, atomicBatches)
	if err := sink(t, js).Append(ctx, "r", lines("r", 1, 2, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "outbox.r", lines("r", 4, 4, "x")[0].Line); err != nil {
		t.Fatal(err)
	}
	rep, err := jetstream.Verify(ctx, js, "EVENTS")
	var ve *journal.Error
	if !errors.Is(err, journal.ErrStreamGap) || !errors.As(err, &ve) || ve.Line != 3 || ve.Expected != 3 || rep.Lines != 2 {
		t.Errorf("Verify: (%+v, %v)", rep, err)
	}
}

func TestTheSinkGoesOnAfterTheServerRestarts(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		ns := startServer(t)
		js := ns.connect(t)
		stream(t, js, time.Minute, m)
		s := sink(t, js)
		if err := s.Append(ctx, "r", lines("r", 1, 10, "x")); err != nil {
			t.Fatal(err)
		}
		ns.stop()
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		if err := s.Append(short, "r", lines("r", 11, 12, "x")); err == nil || errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("append with the server down: %v, want a retriable error", err)
		}
		cancel()
		ns.start()
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := s.Append(ctx, "r", lines("r", 11, 20, "x"))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("append after the restart: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if rep := verify(t, js); rep.Runs["r"].Last != 20 || rep.Lines != 20 {
			t.Errorf("stream after restart: %+v", rep)
		}
	})
}

func TestARelayProjectsAStoreIntoJetStreamThroughAnOutage(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		ns := startServer(t)
		js := ns.connect(t)
		stream(t, js, 100*time.Millisecond, m)
		store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		relay := outboxtest.NewRelay(t, store, sink(t, js), "run-1", outbox.WithBatchSize(16), outbox.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(runCtx) }()
		for i := 0; i < 200; i++ {
			if _, err := store.EnqueueEvent(ctx, "run-1", journal.Builder("run-1", "x", i)); err != nil {
				t.Fatal(err)
			}
			if i == 80 {
				ns.stop()
			}
			if i == 150 {
				ns.start()
			}
		}
		outboxtest.WaitProjected(t, store, "run-1", 200, 30*time.Second)
		stop()
		<-done
		if rep := verify(t, js); rep.Runs["run-1"].Last != 200 || rep.Lines != 200 || rep.Duplicates != 0 {
			t.Errorf("stream: %+v", rep)
		}
	})
}
