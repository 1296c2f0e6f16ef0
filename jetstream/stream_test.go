// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
)

func TestCreateStreamMakesAStreamWithTheSettingsTheSinkNeeds(t *testing.T) {
	ctx := context.Background()
	js := startServer(t).connect(t)
	st, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithSubjectPrefix("book.events"), jetstream.WithDuplicateWindow(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if c.Subjects[0] != "book.events.>" || c.Storage != njs.FileStorage || c.Retention != njs.LimitsPolicy ||
		!c.AllowAtomicPublish || c.Duplicates != time.Minute || c.Replicas != 1 {
		t.Errorf("config: %+v", c)
	}
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithSubjectPrefix("book.events"), jetstream.WithDuplicateWindow(time.Minute)); err != nil {
		t.Errorf("creating it again with the same settings: %v", err)
	}
	_, err = jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithReplicas(3))
	if !errors.Is(err, jetstream.ErrStreamSettings) {
		t.Fatalf("creating it again with other settings: %v, want ErrStreamSettings", err)
	}
	for _, want := range []string{"replicas 1, want 3", "do not capture outbox.>", "duplicate window 1m0s, want 2m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	s, err := jetstream.NewSink(js, "EVENTS", jetstream.WithSubjectPrefix("book.events"))
	if err != nil || s.Mode() != jetstream.AtomicBatches || s.BatchSize() != jetstream.DefaultBatchLimit {
		t.Errorf("NewSink on the created stream: %v, mode %v, batch %d", err, s.Mode(), s.BatchSize())
	}
	for _, bad := range []jetstream.StreamOption{jetstream.WithReplicas(0), jetstream.WithDuplicateWindow(0), jetstream.WithSubjectPrefix("a b"), jetstream.WithSubjectPrefix("a.>")} {
		if _, err := jetstream.CreateStream(ctx, js, "OTHER", bad); err == nil {
			t.Errorf("CreateStream accepted an invalid option")
		}
	}
	if _, err := jetstream.CreateStream(ctx, js, "A.B"); err == nil {
		t.Errorf("CreateStream accepted the stream name A.B")
	}
}

func TestNewSinkSaysWhatToChangeInAStreamThatContradictsIt(t *testing.T) {
	ctx := context.Background()
	js := startServer(t).connect(t)
	for _, tc := range []struct {
		cfg  njs.StreamConfig
		want string
	}{
		{njs.StreamConfig{Subjects: []string{"elsewhere.>"}}, "do not capture outbox.>: add it"},
		{njs.StreamConfig{Subjects: []string{"outbox.*"}, Storage: njs.MemoryStorage}, "use file storage"},
		{njs.StreamConfig{Subjects: []string{"outbox.>"}, Retention: njs.WorkQueuePolicy}, "use the limits policy"},
		{njs.StreamConfig{Subjects: []string{"outbox.>"}, NoAck: true}, "no_ack"},
	} {
		tc.cfg.Name = "S"
		if _, err := js.CreateStream(ctx, tc.cfg); err != nil {
			t.Fatal(err)
		}
		_, err := jetstream.NewSink(js, "S")
		if !errors.Is(err, jetstream.ErrStreamSettings) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrStreamSettings saying %q", tc.cfg, err, tc.want)
		}
		if err := js.DeleteStream(ctx, "S"); err != nil {
			t.Fatal(err)
		}
	}
	stream(t, js, time.Minute, oneAtATime)
	s, err := jetstream.NewSink(js, "EVENTS")
	if err != nil || s.Mode() != jetstream.OneAtATime || s.Mode().String() != "one at a time" {
		t.Errorf("a stream without atomic publish: %v, mode %v", err, s.Mode())
	}
	if _, err := jetstream.NewSink(js, "EVENTS", jetstream.WithMinReplicas(3)); !errors.Is(err, jetstream.ErrStreamSettings) {
		t.Errorf("NewSink with 3 replicas required of a 1-replica stream: %v", err)
	}
	if _, err := jetstream.NewSink(js, "MISSING"); !errors.Is(err, njs.ErrStreamNotFound) {
		t.Errorf("NewSink on a missing stream: %v", err)
	}
	if _, err := jetstream.NewSink(js, "EVENTS", jetstream.WithSubjectPrefix("bad prefix")); err == nil {
		t.Error("NewSink accepted an invalid prefix")
	}
}

// TestABatchAboveTheServersLimitIsSplit: a server configured with a smaller batch limit than the
// default says so when a batch exceeds it; the sink learns the limit and goes on in smaller batches.
func TestABatchAboveTheServersLimitIsSplit(t *testing.T) {
	ctx := context.Background()
	js, s := setup(t, time.Minute, atomicBatches, func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 10 })
	if err := s.Append(ctx, "r", lines("r", 1, 35, "x")); err != nil {
		t.Fatal(err)
	}
	if s.BatchSize() != 10 {
		t.Errorf("BatchSize after the server's answer: %d, want 10", s.BatchSize())
	}
	if rep := verify(t, js); rep.Lines != 35 || rep.Runs["r"].Last != 35 {
		t.Errorf("stream: %+v", rep)
	}
}

func TestASecondStreamWithTheSamePrefixSaysToGiveItAPrefixOfItsOwn(t *testing.T) {
	ctx := context.Background()
	js := startServer(t).connect(t)
	if _, err := jetstream.CreateStream(ctx, js, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	_, err := jetstream.CreateStream(ctx, js, "BILLING")
	if err == nil {
		t.Fatal("a second stream of outbox.> was created")
	}
	// The server's own error stays reachable for whoever branches on it.
	var api *njs.APIError
	if !errors.As(err, &api) || api.ErrorCode != 10065 {
		t.Errorf("%v: the server's subjects-overlap error is not wrapped", err)
	}
	for _, want := range []string{"WithSubjectPrefix", `"ORDERS"`, "outbox.>", "overlap"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if _, err := jetstream.CreateStream(ctx, js, "BILLING", jetstream.WithSubjectPrefix("billing")); err != nil {
		t.Errorf("with a prefix of its own: %v", err)
	}
}
