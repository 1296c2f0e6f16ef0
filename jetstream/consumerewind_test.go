// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

var streamSource = jetstream.StreamSourceName("EVENTS", jetstream.DefaultPrefix)

func lift(t *testing.T, in *inbox.Inbox, how, run string) {
	t.Helper()
	var err error
	if how == "release" {
		err = in.Release(context.Background(), run)
	} else {
		err = in.AcceptGap(context.Background(), run, "given up for the test")
	}
	if err != nil {
		t.Fatalf("%s %s: %v", how, run, err)
	}
}

func wantGap(t *testing.T, err error, pos, first uint64) {
	t.Helper()
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) || !errors.Is(err, jetstream.ErrRetentionGap) {
		t.Fatalf("%v, want a retention gap", err)
	}
	if gap.Position != pos || gap.FirstSeq != first {
		t.Fatalf("gap %+v, want position %d and first sequence %d", gap, pos, first)
	}
}

// The stream source stood at a/1 and q/2 (q quarantined for its gap); a/2, b/1 (b's only line) and
// a/3 came, and a purge removed everything before a/3: a retention gap. A Release (or AcceptGap) of
// q rewinds the source, which reads the stream again from its start, but the position it was
// rewound from stays the floor of the check: still a retention gap, b/1 not given up silently.
func TestAReleaseKeepsTheOldPositionAsTheFloorOfTheRetentionGapCheck(t *testing.T) {
	for _, how := range []string{"release", "accept gap"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			_, js, in := consumeSetup(t)
			publishRun(t, js, "a", 1, 1) // 1
			publishRun(t, js, "q", 2, 2) // 2: q's gap
			if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 1, Quarantined: 1}) {
				t.Fatalf("first call: %+v", rep)
			}
			publishRun(t, js, "a", 2, 2) // 3
			publishRun(t, js, "b", 1, 1) // 4
			publishRun(t, js, "a", 3, 3) // 5
			st, err := js.Stream(ctx, "EVENTS")
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Purge(ctx, njs.WithPurgeSequence(5)); err != nil { // removes 1..4
				t.Fatal(err)
			}
			_, err = jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
			wantGap(t, err, 2, 5)
			lift(t, in, how, "q")
			for range 2 {
				rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
				wantGap(t, err, 2, 5)
				if rep != (inbox.Report{}) {
					t.Fatalf("after the %s: %+v applied", how, rep)
				}
			}
			if diff := cmp.Diff(map[string][]int64{"a": {1}}, applied(t, in)); diff != "" {
				t.Errorf("effects (-want +got):\n%s", diff)
			}
			if _, from, err := in.SourceState(ctx, streamSource); err != nil || from == nil {
				t.Fatalf("the position rewound from: %q, %v", from, err)
			}
			// The operator's acceptance reads on from the first message held; a's own gap shows.
			if rep := applyStream(t, js, in, jetstream.WithAcceptRetentionGap()); rep != (inbox.Report{Quarantined: 1}) {
				t.Fatalf("accepted: %+v", rep)
			}
			if q := quarantineOf(t, in, "a"); q == nil || q.Expected != 2 || q.Got != 3 {
				t.Fatalf("a's quarantine %+v, want its gap at 2", q)
			}
		})
	}
}

func quarantineOf(t *testing.T, in *inbox.Inbox, run string) *inbox.Quarantine {
	t.Helper()
	qs, err := in.Quarantined(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.RunID == run {
			return &q
		}
	}
	return nil
}

// After a Release the stream is read again from its start: the released run's lines apply, the
// others' are duplicates. Messages at or below the position rewound from may be removed meanwhile
// (they were applied): no retention gap. The floor is stored with each position below it, so that
// a call stopped during the reading again keeps it.
func TestAReleaseReadsTheStreamAgainKeepingTheFloorAcrossCalls(t *testing.T) {
	ctx := context.Background()
	stopAfter := 0
	var cancel context.CancelFunc
	_, js, in := consumeSetup(t, inbox.WithBatchLines(1), inbox.WithBatchHook(func(string, inbox.Report) {
		if stopAfter--; stopAfter == 0 {
			cancel()
		}
	}))
	publishRun(t, js, "a", 1, 3) // 1..3
	publishRun(t, js, "q", 1, 1) // 4
	publishRun(t, js, "q", 3, 3) // 5: q's gap
	publishRun(t, js, "b", 1, 2) // 6..7
	applyStream(t, js, in)
	publishRun(t, js, "q", 2, 2) // 8: q's missing line
	lift(t, in, "release", "q")
	// The first call stops after the stream's second message: position 2, floor 7.
	cctx, c := context.WithCancel(ctx)
	cancel, stopAfter = c, 2
	if _, err := jetstream.ApplyStream(cctx, js, "EVENTS", in, insertHandler); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped call: %v", err)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 2 || p.Floor != 7 {
		t.Fatalf("position %+v, want 2 with floor 7", p)
	}
	st, _ := js.Stream(ctx, "EVENTS")
	if err := st.Purge(ctx, njs.WithPurgeSequence(6)); err != nil { // removes 1..5: all applied
		t.Fatal(err)
	}
	// Read on from 3, which the purge moved to 6: b/1 and b/2 are duplicates, q/2 applies.
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
	if err != nil {
		t.Fatalf("after a purge below the floor: %v", err)
	}
	if rep != (inbox.Report{Applied: 1, Duplicates: 2}) {
		t.Errorf("report %+v", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 3), "b": seqs(1, 2), "q": seqs(1, 2)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 8 || p.Floor != 0 {
		t.Fatalf("position %+v, want 8 without a floor", p)
	}
}

// A purge between ApplyStream's first look at the stream and the start of its ordered consumer, which
// then has nothing pending (it starts, silently, at the first message the stream still holds), is a
// retention gap: the stream's last sequence is not stored as the position over lines never read.
func TestAPurgeJustBeforeTheConsumerStartsIsARetentionGap(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 2) // 1..2
	applyStream(t, js, in)
	publishRun(t, js, "b", 1, 1) // 3: b's only line
	publishRun(t, js, "a", 3, 3) // 4
	st, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	purged := false
	jetstream.SetBeforeConsume(func() {
		if !purged {
			purged = true
			if err := st.Purge(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	defer jetstream.SetBeforeConsume(nil)
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
	if !purged {
		t.Fatal("the purge did not run")
	}
	wantGap(t, err, 2, 5)
	if rep != (inbox.Report{}) {
		t.Errorf("report %+v", rep)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 2 {
		t.Fatalf("position %+v, want it left at 2", p)
	}
}

// A stream position with a floor reads back as stored; a floor at or below the sequence is refused.
func TestParseStreamPositionReadsTheFloor(t *testing.T) {
	p, err := jetstream.ParseStreamPosition([]byte("2 2026-12-03T10:00:00Z 7"))
	if err != nil || p.Seq != 2 || p.Floor != 7 {
		t.Fatalf("%+v, %v", p, err)
	}
	for _, bad := range []string{"2 2026-12-03T10:00:00Z 2", "2 2026-12-03T10:00:00Z 1", "2 2026-12-03T10:00:00Z 0",
		"2 2026-12-03T10:00:00Z 07", "2 2026-12-03T10:00:00Z ", "2 2026-12-03T10:00:00Z 7 8"} {
		if p, err := jetstream.ParseStreamPosition([]byte(bad)); err == nil {
			t.Errorf("%q taken as %+v", bad, p)
		}
	}
}
