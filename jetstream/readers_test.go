// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

// readerSeqs returns the registered readers of EVENTS by name.
func readerSeqs(t *testing.T, rs []jetstream.ReaderPosition) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, r := range rs {
		out[r.Name] = r.Seq
	}
	return out
}

func TestAStreamReaderRegistersTheSequenceItsInboxCommittedUnderItsReaderName(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithReaderName("billing"))
	publishRun(t, js, "a", 1, 5)
	applyStream(t, js, in)
	other := openInbox(t, filepath.Join(t.TempDir(), "other.db"))
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", other, insertHandler); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 6, 7)
	applyStream(t, js, in)
	rs, err := jetstream.Readers(context.Background(), js, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	got := readerSeqs(t, rs)
	if got["billing"] != 7 || got[other.ReaderName()] != 5 || len(got) != 2 {
		t.Errorf("readers %v: want billing at 7 and %s at 5", got, other.ReaderName())
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 7 {
		t.Errorf("position %v, want 7", p)
	}
}

func TestAForgottenStreamReaderIsNoLongerListed(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithReaderName("gone"))
	publishRun(t, js, "a", 1, 2)
	applyStream(t, js, in)
	if err := jetstream.ForgetReader(context.Background(), js, "EVENTS", "gone"); err != nil {
		t.Fatal(err)
	}
	rs, err := jetstream.Readers(context.Background(), js, "EVENTS")
	if err != nil || len(rs) != 0 {
		t.Errorf("readers %v, %v: want none", rs, err)
	}
}
