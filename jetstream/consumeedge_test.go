// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
)

func TestAStreamDeletedAndCreatedAgainIsARetentionGap(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 3)
	applyStream(t, js, in)
	if err := js.DeleteStream(ctx, "EVENTS"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // another creation time, whatever the clock's resolution
	stream(t, js, time.Minute, atomicBatches)
	// The new stream has more messages than were read of the old one: sequences alone would read it
	// from 4 on, past its first three.
	publishRun(t, js, "b", 1, 5)
	_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) || !gap.Recreated || gap.Position != 3 || !strings.Contains(err.Error(), "created again") {
		t.Fatalf("ApplyStream: %v, want a retention gap naming the stream created again", err)
	}
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler, jetstream.WithAcceptRetentionGap())
	if err != nil || rep != (inbox.Report{Applied: 5}) {
		t.Fatalf("accepted: %+v, %v: want the new stream read from its start", rep, err)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 3), "b": seqs(1, 5)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	if rep := applyStream(t, js, in); rep != (inbox.Report{}) {
		t.Errorf("after: %+v", rep)
	}
}

func TestEachSubjectFilterKeepsAPositionOfItsOwn(t *testing.T) {
	ctx := context.Background()
	ns := startServer(t)
	js := ns.connect(t)
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "EVENTS", Subjects: []string{"outbox.>", "tenant.>"},
		Storage: njs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	in := openInbox(t, filepath.Join(t.TempDir(), "platform.db"))
	publishRun(t, js, "a", 1, 2) // 1..2
	for seq := int64(1); seq <= 3; seq++ {
		if _, err := js.Publish(ctx, "tenant."+jetstream.Token("t"), jline("t", seq, "x")); err != nil { // 3..5
			t.Fatal(err)
		}
	}
	publishRun(t, js, "a", 3, 3) // 6
	tenant := jetstream.WithSubjectPrefix("tenant")
	if rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler, tenant); err != nil || rep.Applied != 3 {
		t.Fatalf("tenant: %+v, %v", rep, err)
	}
	// The tenant's position is the stream's last sequence, though its last line is at 5: everything of
	// its filter up to 6 is applied. So removing the other subjects' messages is no gap of its.
	p, err := in.SourcePosition(ctx, jetstream.StreamSourceName("EVENTS", "tenant"))
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := jetstream.ParseStreamPosition(p); err != nil || pos.Seq != 6 {
		t.Errorf("tenant position %q (%v), want stream sequence 6", p, err)
	}
	if streamPosition(t, in) != nil {
		t.Errorf("the default filter has a position before it read anything")
	}
	if rep := applyStream(t, js, in); rep.Applied != 3 {
		t.Errorf("outbox: %+v", rep)
	}
	st, _ := js.Stream(ctx, "EVENTS")
	if err := st.Purge(ctx, njs.WithPurgeSequence(7)); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []jetstream.ConsumeOption{tenant, nil} {
		if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler, opt); err != nil {
			t.Errorf("after a purge of what was read: %v", err)
		}
	}
}

func TestApplyStreamStopsAtTheStreamsLastMessageWhenItBegan(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithBatchLines(2))
	publishRun(t, js, "a", 1, 5)
	published := false
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if !published {
			published = true
			publishRun(t, js, "a", 6, 8)
		}
		return insertHandler(ctx, tx, ev)
	})
	if err != nil || rep != (inbox.Report{Applied: 5}) {
		t.Errorf("ApplyStream: %+v, %v: want the 5 lines there when it began", rep, err)
	}
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 3}) {
		t.Errorf("next call: %+v", rep)
	}
}

func TestApplyStreamRefusesWhatItCannotReadAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 1)
	for _, c := range []struct {
		name   string
		js     njs.JetStream
		stream string
		in     *inbox.Inbox
		h      inbox.Handler
		opts   []jetstream.ConsumeOption
		is     error
	}{
		{"nil JetStream", nil, "EVENTS", in, insertHandler, nil, nil},
		{"nil inbox", js, "EVENTS", nil, insertHandler, nil, nil},
		{"nil handler", js, "EVENTS", in, nil, nil, nil},
		{"empty stream name", js, "", in, insertHandler, nil, nil},
		{"a dot in the stream name", js, "EVENTS.x", in, insertHandler, nil, nil},
		{"a wildcard in the stream name", js, "EV>", in, insertHandler, nil, nil},
		{"a space in the stream name", js, "EVENTS x", in, insertHandler, nil, nil},
		{"a control byte in the stream name", js, "EVENTS\x00", in, insertHandler, nil, nil},
		{"invalid UTF-8 in the stream name", js, "EVENTS\xff", in, insertHandler, nil, nil},
		{"a stream name too long", js, strings.Repeat("E", 300), in, insertHandler, nil, nil},
		{"an invalid prefix", js, "EVENTS", in, insertHandler, []jetstream.ConsumeOption{jetstream.WithSubjectPrefix("out box")}, nil},
		{"a stream that does not exist", js, "NOPE", in, insertHandler, nil, njs.ErrStreamNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := jetstream.ApplyStream(ctx, c.js, c.stream, c.in, c.h, c.opts...)
			if err == nil || rep != (inbox.Report{}) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("ApplyStream: %+v, %v", rep, err)
			}
			if errors.Is(c.is, njs.ErrStreamNotFound) {
				return // FollowStream waits for it
			}
			if err := jetstream.FollowStream(ctx, c.js, c.stream, c.in, c.h, c.opts...); err == nil || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("FollowStream: %v", err)
			}
		})
	}
	srcs, err := in.Sources(ctx)
	if err != nil || len(srcs) != 0 {
		t.Errorf("sources %+v, %v: want none stored", srcs, err)
	}
	if got := applied(t, in); len(got) != 0 {
		t.Errorf("applied %v", got)
	}
}

func TestAStoredPositionThatIsNotAStreamPositionStopsTheSource(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 1)
	name := jetstream.StreamSourceName("EVENTS", jetstream.DefaultPrefix)
	if _, err := in.ApplyFrom(ctx, name, nil, []byte("12"), nil, insertHandler); err != nil {
		t.Fatal(err)
	}
	if rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); err == nil || rep != (inbox.Report{}) {
		t.Errorf("ApplyStream: %+v, %v: want the position refused", rep, err)
	}
}

func TestParseStreamPositionRefusesAnythingButItsOwnEncoding(t *testing.T) {
	good := "42 2026-12-02T03:04:05.123456789Z"
	p, err := jetstream.ParseStreamPosition([]byte(good))
	if err != nil || p.Seq != 42 || p.Created.Nanosecond() != 123456789 {
		t.Fatalf("%q: %+v, %v", good, p, err)
	}
	for _, bad := range []string{"", "42", "042 2026-12-02T03:04:05.123456789Z", "-1 2026-12-02T03:04:05Z",
		"42 yesterday", "42  2026-12-02T03:04:05Z", "42 2026-12-02T03:04:05+01:00", "42 2026-12-02T03:04:05.100Z",
		good + " ", "18446744073709551616 2026-12-02T03:04:05Z"} {
		if _, err := jetstream.ParseStreamPosition([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestACancelledContextCostsOnlyItsOwnCall(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithBatchLines(2))
	publishRun(t, js, "a", 1, 6)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before: %v", err)
	}
	if err := jetstream.FollowStream(ctx, js, "EVENTS", in, insertHandler); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream cancelled before: %v", err)
	}
	// Cancelled inside the second batch: the first stands with its position, the second is not
	// stored, and the next call applies the rest once.
	ctx, cancel = context.WithCancel(context.Background())
	_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, func(hctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 3 {
			cancel()
		}
		return insertHandler(hctx, tx, ev)
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled inside: %v", err)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 2 {
		t.Errorf("position %v, want 2", p)
	}
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 4}) {
		t.Errorf("after: %+v", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 6)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestLinesTheSinkPublishedAreAppliedWhateverTheRunID(t *testing.T) {
	_, js, in := consumeSetup(t)
	s := sink(t, js)
	odd := "b.with*odd>chars ünïcode"
	for _, run := range []string{"a", odd} {
		if err := s.Append(context.Background(), run, lines(run, 1, 3, "x")); err != nil {
			t.Fatal(err)
		}
	}
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 6}) {
		t.Errorf("report %+v", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 3), odd: seqs(1, 3)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestTwoCallsOnOneSourceAtOnceApplyEachLineOnce(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithBatchLines(5))
	publishRun(t, js, "a", 1, 200)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, insertHandler)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("ApplyStream: %v", err)
		}
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 200)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 200 {
		t.Errorf("position %v", p)
	}
}

func TestAStreamWhoseLastMessagesWereDeletedIsReadToItsEnd(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 3)
	publishRun(t, js, "b", 1, 2) // 4..5, deleted
	st, _ := js.Stream(ctx, "EVENTS")
	for _, seq := range []uint64{4, 5} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 3}) {
		t.Errorf("report %+v", rep)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 5 {
		t.Errorf("position %v, want the stream's last sequence, 5", p)
	}
	publishRun(t, js, "a", 4, 4)
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 1}) {
		t.Errorf("next: %+v", rep)
	}
}

func TestAServerRestartKeepsThePositionValid(t *testing.T) {
	ns, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 3)
	applyStream(t, js, in)
	ns.stop()
	ns.start()
	publishWhenUp(t, js, "a", 4, 5)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rep, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, insertHandler)
		if err == nil {
			if rep != (inbox.Report{Applied: 2}) {
				t.Errorf("after the restart: %+v", rep)
			}
			break
		}
		if errors.Is(err, jetstream.ErrRetentionGap) || time.Now().After(deadline) {
			t.Fatalf("after the restart: %v", err)
		}
	}
}

// TestAStreamSourcesErrorNamesThePackageOnce: what ApplyStream and FollowStream return reads
// "jetstream: …" once, naming no other package of the project, while errors.Is and errors.As still
// find what a caller branches on.
func TestAStreamSourcesErrorNamesThePackageOnce(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithMaxLineSize(128))
	publishRun(t, js, "a", 1, 1)
	publishRaw(t, js, "a", []byte(`{"engine_run_id":"a","seq":2,"type":"`+strings.Repeat("x", 200)+`"}`))
	failing := errors.New("the platform's table is read-only")
	for _, tc := range []struct {
		name string
		want error
		call func() error
	}{
		{"a handler's error", failing, func() error {
			_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, func(context.Context, *sql.Tx, inbox.Event) error { return failing })
			return err
		}},
		{"a line over the limit", journal.ErrMalformed, func() error {
			_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
			var le *inbox.LineError
			if !errors.As(err, &le) {
				t.Errorf("%v is no *inbox.LineError", err)
			}
			return err
		}},
		{"a missing stream", njs.ErrStreamNotFound, func() error {
			_, err := jetstream.ApplyStream(ctx, js, "MISSING", in, insertHandler)
			return err
		}},
		{"a cancelled context", context.Canceled, func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := jetstream.ApplyStream(c, js, "EVENTS", in, insertHandler)
			return err
		}},
		{"an invalid stream name", nil, func() error {
			_, err := jetstream.ApplyStream(ctx, js, "a.b", in, insertHandler)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			msg := err.Error()
			// "jetstream:" without a space begins the source's name, which the message may quote.
			if n := strings.Count(msg, "jetstream: "); n != 1 || !strings.HasPrefix(msg, "jetstream: ") {
				t.Errorf("%q names the package %d times, want once, first", msg, n)
			}
			if strings.Contains(msg, "inbox: ") || strings.Contains(msg, "journal: ") {
				t.Errorf("%q names another package", msg)
			}
		})
	}
}

func TestAStreamThatEndsBeforeThePositionIsReadAgainFromItsStart(t *testing.T) {
	// A stream that lost its last messages (one replica's power failure without sync always) gives
	// their sequences to the next ones: those are read, not skipped as already read, and what was
	// applied comes back as duplicates.
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 5)
	st, _ := js.Stream(ctx, "EVENTS")
	created := st.CachedInfo().Created.UTC().Format(time.RFC3339Nano)
	name := jetstream.StreamSourceName("EVENTS", jetstream.DefaultPrefix)
	applyStream(t, js, in)
	// As if the stream had held 8 messages when the position was stored, and lost 6..8.
	if _, err := in.ApplyFrom(ctx, name, []byte("5 "+created), []byte("8 "+created), nil, insertHandler); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "b", 1, 2) // 6..7, below the position 8
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 2, Duplicates: 5}) {
		t.Errorf("report %+v: want b's two lines applied, a's five duplicates", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 5), "b": seqs(1, 2)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 7 {
		t.Errorf("position %v, want 7", p)
	}
}
