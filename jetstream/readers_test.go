// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

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

func TestAReaderWhoseBatchFailsRegistersNothingPastWhatItCommittedAndTrimKeepsIt(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithReaderName("failing"))
	publishRun(t, js, "a", 1, 3)
	applyStream(t, js, in)
	publishRun(t, js, "a", 4, 6)
	refuse := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 5 {
			return errors.New("refused")
		}
		return insertHandler(ctx, tx, ev)
	}
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, refuse); err == nil {
		t.Fatal("ApplyStream with a refusing handler: no error")
	}
	p := streamPosition(t, in)
	rs, err := jetstream.Readers(context.Background(), js, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if got := readerSeqs(t, rs)["failing"]; p == nil || got != p.Seq {
		t.Fatalf("registered %d, position %v: want the registration at the committed position", got, p)
	}
	trim(t, js, jetstream.WithKeep(0))
	if _, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, insertHandler); err != nil {
		t.Fatalf("ApplyStream after the trim: %v", err)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 6)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}
