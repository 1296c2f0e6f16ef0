// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// foldedKeyLines are run a's line 2 with a member whose name encoding/json folds to a key's.
var foldedKeyLines = []string{
	`{"engine_run_id":"a","seq":2,"ENGINE_RUN_ID":"upstream-7","SEQ":1001}`,
	`{"engine_run_id":"a","seq":2,"Seq":1001}`,
	`{"engine_run_id":"a","seq":2,"\u0053EQ":1001}`,
	`{"engine_run_id":"a","seq":2,"ſeq":1001}`,
	`{"engine_run_id":"a","seq":2,"engine_run_\u0049d":"upstream-7"}`,
}

// TestAppendRefusesALineWithAMemberNamedLikeAKey: encoding/json matches member names to a struct's
// fields case-insensitively (and "ſ" to "s"), so a consumer that decodes such a line reads another
// key than the one it is published under. The sink refuses the batch before publishing any of it.
func TestAppendRefusesALineWithAMemberNamedLikeAKey(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		for _, bad := range foldedKeyLines {
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

// TestAMessageWithAMemberNamedLikeAKeyStopsTheSourceBeforeIt: a message published past the sink,
// read by ApplyStream, is malformed like any line that is not a journal line.
func TestAMessageWithAMemberNamedLikeAKeyStopsTheSourceBeforeIt(t *testing.T) {
	for _, bad := range foldedKeyLines {
		t.Run(bad, func(t *testing.T) {
			ctx := context.Background()
			_, js, in := consumeSetup(t)
			publishRun(t, js, "a", 1, 1)
			at := publishRaw(t, js, "a", []byte(bad))
			publishRun(t, js, "a", 3, 3)
			_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
			want := fmt.Sprintf("subject outbox.a, stream sequence %d", at)
			if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), want) {
				t.Errorf("ApplyStream: %v, want journal.ErrMalformed naming %q", err, want)
			}
			if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 1)}, applied(t, in)); diff != "" {
				t.Errorf("effects (-want +got):\n%s", diff)
			}
		})
	}
}
