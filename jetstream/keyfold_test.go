package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestAppendRefusesALineWithAMemberNamedLikeAKey: encoding/json matches member names to a struct's
// fields case-insensitively (and "ſ" to "s"), so a consumer that decodes such a line reads another
// key than the one it is published under. The sink refuses the batch before publishing any of it.
func TestAppendRefusesALineWithAMemberNamedLikeAKey(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		for _, bad := range []string{
			`{"engine_run_id":"a","seq":2,"ENGINE_RUN_ID":"upstream-7","SEQ":1001}`,
			`{"engine_run_id":"a","seq":2,"Seq":1001}`,
			`{"engine_run_id":"a","seq":2,"\u0053EQ":1001}`,
			`{"engine_run_id":"a","seq":2,"ſeq":1001}`,
			`{"engine_run_id":"a","seq":2,"engine_run_\u0049d":"upstream-7"}`,
		} {
			batch := []outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"a","seq":1}`)}, {Seq: 2, Line: []byte(bad)}}
			err := s.Append(ctx, "a", batch)
			if !errors.Is(err, jetstream.ErrLineKey) || !errors.Is(err, journal.ErrMalformed) || !errors.Is(err, outbox.ErrSinkRefused) {
				t.Errorf("%s: %v, want ErrLineKey, journal.ErrMalformed and ErrSinkRefused", bad, err)
			}
		}
		if rep := verify(t, js); rep.Lines != 0 {
			t.Errorf("the stream holds %d lines of refused batches", rep.Lines)
		}
	})
}
