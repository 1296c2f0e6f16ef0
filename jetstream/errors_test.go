// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestAnErrorNamesThePackageOnce: the typical failures of the sink and of the stream's setup read
// "jetstream: …" once, and no sentinel of this package repeats the journal's prefix, while errors.Is
// still finds every sentinel a caller branches on.
func TestAnErrorNamesThePackageOnce(t *testing.T) {
	ctx := context.Background()
	js, s := setup(t, time.Minute, atomicBatches)
	if err := s.Append(ctx, "r", lines("r", 1, 2, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "MEMORY", Subjects: []string{"memory.>"}, Storage: njs.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want []error
		fail func() error
	}{
		{"a batch that leaves a gap", []error{jetstream.ErrGap, journal.ErrStreamGap, outbox.ErrSinkRefused}, func() error {
			return s.Append(ctx, "r", lines("r", 4, 4, "x"))
		}},
		{"a redelivery with other bytes", []error{jetstream.ErrConflict, journal.ErrPayloadConflict, outbox.ErrSinkRefused}, func() error {
			return s.Append(ctx, "r", lines("r", 2, 2, "other"))
		}},
		{"a line whose key is not its row's", []error{jetstream.ErrLineKey, outbox.ErrSinkRefused}, func() error {
			return s.Append(ctx, "r", lines("other", 3, 3, "x"))
		}},
		{"a line that is not a journal line", []error{jetstream.ErrLineKey, journal.ErrMalformed, outbox.ErrSinkRefused}, func() error {
			return s.Append(ctx, "r", []outbox.EventLine{{Seq: 3, Line: []byte(`[3]`)}})
		}},
		{"a run id past the server's limits", []error{jetstream.ErrTooLarge, outbox.ErrSinkRefused}, func() error {
			long := strings.Repeat("r", jetstream.MaxSubjectLen)
			return s.Append(ctx, long, lines(long, 1, 1, "x"))
		}},
		{"a sink on a stream that contradicts it", []error{jetstream.ErrStreamSettings}, func() error {
			_, err := jetstream.NewSink(js, "MEMORY", jetstream.WithSubjectPrefix("memory"))
			return err
		}},
		{"a sink on a missing stream", []error{njs.ErrStreamNotFound}, func() error {
			_, err := jetstream.NewSink(js, "MISSING")
			return err
		}},
		{"a stream created over one with other settings", []error{jetstream.ErrStreamSettings}, func() error {
			_, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithReplicas(3))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fail()
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want %v", err, want)
				}
			}
			if err == nil {
				return
			}
			msg := err.Error()
			if n := strings.Count(msg, "jetstream:"); n != 1 || !strings.HasPrefix(msg, "jetstream: ") {
				t.Errorf("%q names the package %d times, want once, first", msg, n)
			}
			if strings.Contains(msg, "jetstream: journal:") {
				t.Errorf("%q names two packages in one sentinel", msg)
			}
		})
	}
}
