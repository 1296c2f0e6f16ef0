// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

func TestStatusGivesEachReaderItsLagAndWhatTheCapTookFromIt(t *testing.T) {
	ctx := context.Background()
	_, js, fast := consumeSetup(t, inbox.WithReaderName("fast"))
	slow := openInbox(t, filepath.Join(t.TempDir(), "slow.db"), inbox.WithReaderName("slow"))
	publishRun(t, js, "a", 1, 4) // stream sequences 1..4
	applyStream(t, js, slow)
	publishRun(t, js, "a", 5, 10) // 5..10
	applyStream(t, js, fast)
	publishRun(t, js, "b", 1, 2) // 11..12

	st, err := jetstream.Status(ctx, js, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastSeq != 12 || st.Msgs != 12 || st.CappedBelow != 0 || len(st.Readers) != 2 {
		t.Fatalf("status before the cap: %+v", st)
	}
	lags := map[string]jetstream.ReaderLag{}
	for _, r := range st.Readers {
		lags[r.Name] = r
	}
	if lags["fast"].Lag != 2 || lags["slow"].Lag != 8 || lags["fast"].CapTook != 0 || lags["slow"].CapTook != 0 {
		t.Errorf("lags before the cap: %+v", st.Readers)
	}

	// A cap of about three messages removes what the slow reader had not applied.
	rep, err := jetstream.Trim(ctx, js, "EVENTS", jetstream.WithKeep(0), jetstream.WithMaxBytes(st.Bytes*3/12))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Capped <= 5 {
		t.Fatalf("the cap removed below %d, want past the slow reader at 4", rep.Capped)
	}
	st, err = jetstream.Status(ctx, js, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	lags = map[string]jetstream.ReaderLag{}
	for _, r := range st.Readers {
		lags[r.Name] = r
	}
	if st.CappedBelow != rep.Capped || st.Bytes > rep.BytesAfter {
		t.Errorf("status after the cap: %+v, trim %+v", st, rep)
	}
	if got, want := lags["slow"].CapTook, rep.Capped-1-4; got != want {
		t.Errorf("the cap took %d from the slow reader, want %d", got, want)
	}
	if want := uint64(max(0, int64(rep.Capped)-1-10)); lags["fast"].CapTook != want {
		t.Errorf("the cap took %d from the fast reader, want %d", lags["fast"].CapTook, want)
	}
	if lags["slow"].Lag != 8 {
		t.Errorf("the slow reader's lag %d, want 8", lags["slow"].Lag)
	}
}

func TestStatusOfAStreamNoReaderRegisteredWithListsNone(t *testing.T) {
	_, js, _ := consumeSetup(t)
	publishRun(t, js, "a", 1, 3)
	st, err := jetstream.Status(context.Background(), js, "EVENTS")
	if err != nil || st.LastSeq != 3 || len(st.Readers) != 0 || st.CappedBelow != 0 {
		t.Errorf("status %+v, %v: want 3 messages and no reader", st, err)
	}
}
