// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestWithForgetProjectedTheLiveRunsProjectedRowsGoAsTheRelayGoesAndTheLedgerStays(t *testing.T) {
	t.Parallel()
	for _, forget := range []bool{true, false} {
		t.Run(fmt.Sprintf("forget=%v", forget), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, path := outboxtest.Setup(t)
			sink := outboxtest.NewMemSink()
			relay := outboxtest.NewRelay(t, s, sink, "r", outbox.WithForgetProjected(forget), outbox.WithBatchSize(3))
			for i := range 10 {
				var err error
				switch {
				case i%3 == 0:
					_, _, err = s.EnqueueOnce(ctx, "r", fmt.Sprintf("unit:%d", i), journal.Builder("r", "done", i))
				case i == 5:
					_, err = s.EnqueueEvent(ctx, "r", journal.Builder("r", "big", strings.Repeat("x", 4096)))
				default:
					_, err = s.EnqueueEvent(ctx, "r", journal.Builder("r", "spend", i))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := relay.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := len(sink.All()); got != 10 {
				t.Fatalf("the sink has %d lines, want 10", got)
			}
			st := runStats(t, s, "r")
			wantLines := int64(10)
			if forget {
				wantLines = 4 // the ledger's rows: units 0, 3, 6, 9
			}
			if st.Lines != wantLines || st.LedgerLines != 4 || st.LastSeq != 10 || st.Projected != 10 {
				t.Errorf("stats %+v; want %d lines stored, 4 in the ledger, last seq 10", st, wantLines)
			}
			var spilled int
			outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled)
			if forget && spilled != 0 {
				t.Errorf("%d large lines kept after their rows were forgotten", spilled)
			}
			if ok, _, err := s.EnqueueOnce(ctx, "r", "unit:3", journal.Builder("r", "done", 3)); ok || err != nil {
				t.Errorf("a key of the ledger announced again: %v, %v", ok, err)
			}
			if seq, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "spend", 11)); err != nil || seq != 11 {
				t.Errorf("next seq %d, %v; want 11", seq, err)
			}
			if err := relay.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// Everything but the ledger forgotten: the next number still follows the highest.
			if forget {
				if seq, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "spend", 12)); err != nil || seq != 12 {
					t.Errorf("next seq %d, %v; want 12", seq, err)
				}
			}
			if err := outboxtest.NewRelay(t, outboxtest.Reopen(t, s), sink, "next").Recover(ctx); err != nil {
				t.Fatal(err)
			}
			for i, l := range sink.All() {
				if l.Seq != int64(i+1) {
					t.Fatalf("the sink's line %d has seq %d", i, l.Seq)
				}
			}
		})
	}
}
