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

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/outbox"
)

// lowerMaxMsgSize sets the stream EVENTS's max message size, behind the back of the sinks made before.
func lowerMaxMsgSize(t *testing.T, js njs.JetStream, size int32) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = size
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// bigLine is a journal line of run, seq, of n bytes.
func bigLine(run string, seq int64, n int) outbox.EventLine {
	head := fmt.Sprintf(`{"engine_run_id":%q,"seq":%d,"pad":"`, run, seq)
	return outbox.EventLine{Seq: seq, Line: []byte(head + strings.Repeat("p", n-len(head)-2) + `"}`)}
}

func TestALinePastAStreamLimitLoweredAfterNewSinkIsTooLargeNamingRunSeqAndBothSizes(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		if err := s.Append(ctx, "r", lines("r", 1, 2, "x")); err != nil {
			t.Fatal(err)
		}
		lowerMaxMsgSize(t, js, 2048)
		batch := append(lines("r", 3, 3, "x"), bigLine("r", 4, 3000), bigLine("r", 5, 2500))
		err := s.Append(ctx, "r", batch)
		if !errors.Is(err, jetstream.ErrTooLarge) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Fatalf("append past the lowered limit: %v, want ErrTooLarge, a refusal", err)
		}
		for _, want := range []string{`run "r"`, "seq 4", "3000 bytes", "2048 bytes", "max message size"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		// The sink now knows the limit: the next attempt is refused before anything is published.
		if err := s.Append(ctx, "r", batch[1:2]); !errors.Is(err, jetstream.ErrTooLarge) {
			t.Errorf("second attempt: %v, want ErrTooLarge", err)
		}
		if rep := verify(t, js); rep.Runs["r"].Last > 3 {
			t.Errorf("the stream took a line past its limit: %+v", rep)
		}
	})
}

func TestARelayStopsOnAStreamLimitLoweredUnderIt(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		line := bigLine("run-1", 1, 4000).Line
		if _, err := store.EnqueueEvent(ctx, "run-1", func(int64) ([]byte, error) { return line, nil }); err != nil {
			t.Fatal(err)
		}
		lowerMaxMsgSize(t, js, 1024)
		relay := outboxtest.NewRelay(t, store, s, "run-1", outbox.WithBackoff(time.Millisecond, 10*time.Millisecond))
		runCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err = relay.Run(runCtx)
		if !errors.Is(err, jetstream.ErrTooLarge) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Fatalf("Run: %v, want it to stop on ErrTooLarge", err)
		}
		for _, want := range []string{`run "run-1"`, "seq 1", "4000 bytes", "1024 bytes"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
		if p, err := store.Projected(ctx, "run-1"); err != nil || p != 0 {
			t.Errorf("projected %d, %v; want 0, the line kept", p, err)
		}
	})
}

func TestNewSinkRefusesLimitsThatDeleteLinesAReDeliveryMustFind(t *testing.T) {
	ctx := context.Background()
	js := startServer(t).connect(t)
	for _, tc := range []struct {
		name string
		cfg  njs.StreamConfig
		want string // empty: allowed
	}{
		{"max age", njs.StreamConfig{MaxAge: time.Hour}, "max age 1h0m0s deletes lines"},
		{"max age, discard new", njs.StreamConfig{MaxAge: time.Hour, Discard: njs.DiscardNew}, "max age 1h0m0s deletes lines"},
		{"max messages per subject", njs.StreamConfig{MaxMsgsPerSubject: 10}, "max messages per subject 10 deletes"},
		{"max messages per subject, discard new", njs.StreamConfig{MaxMsgsPerSubject: 10, Discard: njs.DiscardNew},
			"set the discard-new policy and discard new per subject"},
		{"max messages", njs.StreamConfig{MaxMsgs: 100}, "max messages 100 with the discard-old policy deletes"},
		{"max bytes", njs.StreamConfig{MaxBytes: 1 << 20}, "max bytes 1048576 with the discard-old policy deletes"},
		{"max messages, discard new", njs.StreamConfig{MaxMsgs: 100, Discard: njs.DiscardNew}, ""},
		{"max bytes, discard new", njs.StreamConfig{MaxBytes: 1 << 20, Discard: njs.DiscardNew}, ""},
		{"max messages per subject, discard new per subject",
			njs.StreamConfig{MaxMsgsPerSubject: 10, Discard: njs.DiscardNew, DiscardNewPerSubject: true}, ""},
		{"max message size", njs.StreamConfig{MaxMsgSize: 4096}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name, tc.cfg.Subjects, tc.cfg.Storage = "S", []string{"outbox.>"}, njs.FileStorage
			if _, err := js.CreateStream(ctx, tc.cfg); err != nil {
				t.Fatal(err)
			}
			defer js.DeleteStream(ctx, "S")
			_, err := jetstream.NewSink(js, "S")
			if tc.want == "" {
				if err != nil {
					t.Errorf("NewSink: %v, want it allowed", err)
				}
				return
			}
			if !errors.Is(err, jetstream.ErrStreamSettings) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSink: %v, want ErrStreamSettings saying %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "remove it") {
				t.Errorf("%q does not say what to change", err)
			}
			if _, err := jetstream.CreateStream(ctx, js, "S"); !errors.Is(err, jetstream.ErrStreamSettings) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CreateStream over it: %v, want ErrStreamSettings saying %q", err, tc.want)
			}
		})
	}
}

// TestAFullDiscardNewStreamRefusesLinesInsteadOfLosingThem is why NewSink allows a limit under the
// discard-new policy: the stream keeps every line it took, re-deliveries of them are still confirmed,
// and the next line is refused as a retriable failure, so the outbox keeps it until the limit is raised.
func TestAFullDiscardNewStreamRefusesLinesInsteadOfLosingThem(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js := startServer(t).connect(t)
		if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "EVENTS", Subjects: []string{"outbox.>"}, Storage: njs.FileStorage,
			MaxMsgs: 3, Discard: njs.DiscardNew, AllowAtomicPublish: m == atomicBatches}); err != nil {
			t.Fatal(err)
		}
		s := sink(t, js)
		if err := s.Append(ctx, "r", lines("r", 1, 3, "x")); err != nil {
			t.Fatal(err)
		}
		err := s.Append(ctx, "r", lines("r", 4, 5, "x"))
		if err == nil || errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("append to a full stream: %v, want a retriable failure", err)
		}
		if err := sink(t, js).Append(ctx, "r", lines("r", 1, 3, "x")); err != nil {
			t.Errorf("re-delivery to the full stream: %v", err)
		}
		if rep := verify(t, js); rep.Lines != 3 || rep.Runs["r"].Last != 3 {
			t.Errorf("stream: %+v", rep)
		}
	})
}
