// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestAStreamHoldingRunsTheBookNeverRecordedStopsTheRelayBeforeItPublishes(t *testing.T) {
	js, sk := setup(t, time.Minute, atomicBatches)
	ctx := outboxtest.Patient(t)
	// Another engine's life, whose book this one is not: the stream holds run "lost" up to seq 3.
	if err := sk.Append(ctx, "lost", lines("lost", 1, 3, "order")); err != nil {
		t.Fatal(err)
	}
	// The sink lists its runs with their last seq, from the stream's per-subject counts.
	if runs, err := sk.SinkRuns(ctx); err != nil || len(runs) != 1 || runs[0] != (outbox.SinkRun{RunID: "lost", LastSeq: 3}) {
		t.Fatalf("SinkRuns: %+v, %v", runs, err)
	}
	s, _ := outboxtest.Setup(t)
	if _, err := s.EnqueueEvent(ctx, "today", journal.Handshake("today", nil)); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(s, sink(t, js), "today")
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Recover(ctx); !errors.Is(err, outbox.ErrBookBehind) || !strings.Contains(err.Error(), `run "lost"`) {
		t.Fatalf("Recover: %v; want ErrBookBehind naming run lost", err)
	}
	if err := relay.Flush(ctx); !errors.Is(err, outbox.ErrBookBehind) {
		t.Fatalf("Flush: %v; want ErrBookBehind", err)
	}
	if rep := verify(t, js); len(rep.Runs) != 1 {
		t.Fatalf("the stream holds %d runs; want only the one before the start", len(rep.Runs))
	}
	// A stream shared with another book's engines is the operator's to declare.
	relay, err = outbox.NewRelay(s, sink(t, js), "today", outbox.WithBookCheck(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}
