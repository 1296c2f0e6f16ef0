// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

func TestAttackGivenUpSeqsInsideADigestRowAreStaleOnceTheRowGoesOn(t *testing.T) {
	ctx := context.Background()
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 5))
	mustApply(t, in, [][]byte{line("r", 10)})
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, in, lines("r", 10, 12))
	if _, kept := storedDigest(t, rawDB(t, path), "r", 7); !kept {
		t.Log("no zeros stored for the given-up seqs") // either is fine; the outcome is what counts
	}
	in = reopen(t, in, path)
	for seq := int64(6); seq <= 9; seq++ {
		for _, body := range []string{"", "x"} {
			if rep := applyOne(t, in, line("r", seq, body)); rep != (inbox.Report{Stale: 1}) {
				t.Fatalf("given-up seq %d body %q: %+v, want Stale", seq, body, rep)
			}
		}
	}
	for _, seq := range []int64{1, 5, 10, 12} {
		if rep := applyOne(t, in, line("r", seq)); rep != (inbox.Report{Duplicates: 1}) {
			t.Fatalf("seq %d: %+v, want duplicate", seq, rep)
		}
	}
}

func TestAttackAGapAcceptedBeforeARunsFirstLineMakesItsEarlierSeqsStale(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, [][]byte{line("r", 5)})
	if err := in.AcceptGap(ctx, "r", "started late"); err != nil {
		t.Fatal(err)
	}
	if p := position(t, in, "r"); p != 4 {
		t.Fatalf("position %d", p)
	}
	if rep := mustApply(t, in, lines("r", 1, 6)); rep != (inbox.Report{Stale: 4, Applied: 2}) {
		t.Fatalf("%+v", rep)
	}
	if err := in.AcceptGap(ctx, "r", "again"); err == nil {
		t.Fatal("a second AcceptGap of a run not quarantined succeeded")
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil || len(gaps) != 1 || gaps[0].FirstSeq != 1 || gaps[0].LastSeq != 4 {
		t.Fatalf("%+v %v", gaps, err)
	}
}
