// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

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

// writeReaderKey writes the key of reader name in EVENTS' readers' bucket at seq, as another consumer
// under that name would, in the stream the key's current value was taken in.
func writeReaderKey(t *testing.T, js njs.JetStream, name string, seq uint64) {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, jetstream.ReadersBucket("EVENTS"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "r."+name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jetstream.ParseStreamPosition(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "r."+name, fmt.Appendf(nil, "%d %s", seq, p.Created.UTC().Format(time.RFC3339Nano))); err != nil {
		t.Fatal(err)
	}
}

func TestAFollowerStopsWhenAnotherConsumerWritesItsReaderKey(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithReaderName("shared"), inbox.WithPollInterval(20*time.Millisecond))
	publishRun(t, js, "a", 1, 4)
	f := follow(t, js, in, insertHandler)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 4)})
	waitRegistered(t, js, "shared")
	for deadline := time.Now().Add(time.Minute); ; {
		rs, err := jetstream.Readers(context.Background(), js, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if readerSeqs(t, rs)["shared"] == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower did not register 4: %v", rs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Another inbox under the same name, behind: its position, written over the follower's.
	writeReaderKey(t, js, "shared", 1)
	publishRun(t, js, "a", 5, 5)
	err, ended := f.wait(time.Minute)
	if !ended || !errors.Is(err, jetstream.ErrReaderNameShared) {
		t.Fatalf("FollowStream: %v (ended %v), want ErrReaderNameShared", err, ended)
	}
	// What it applied before it stopped is committed.
	if got := applied(t, in)["a"]; len(got) != 5 {
		t.Errorf("applied %v, want 1..5", got)
	}
}

func TestAFollowerWhoseReaderWasForgottenRegistersAgain(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithReaderName("gone"), inbox.WithPollInterval(20*time.Millisecond))
	publishRun(t, js, "a", 1, 2)
	f := follow(t, js, in, insertHandler)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 2)})
	waitRegistered(t, js, "gone")
	if err := jetstream.ForgetReader(context.Background(), js, "EVENTS", "gone"); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 3, 3)
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 3)})
	waitRegistered(t, js, "gone")
	if err, ended := f.wait(0); ended {
		t.Fatalf("FollowStream ended: %v", err)
	}
}

// A reader whose key cannot be written applies nothing: the call fails, saying which reader it could
// not register, before it reads a message or stores a position.
func TestAReaderThatCannotRegisterFailsBeforeApplyingAnything(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t, inbox.WithReaderName("unwritable"))
	publishRun(t, js, "a", 1, 3)
	// Values of at most 4 bytes: the server refuses every write of a position.
	if _, err := js.CreateKeyValue(ctx, njs.KeyValueConfig{Bucket: jetstream.ReadersBucket("EVENTS"), MaxValueSize: 4}); err != nil {
		t.Fatal(err)
	}
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
	if err == nil || !strings.Contains(err.Error(), `register reader "unwritable"`) || rep != (inbox.Report{}) {
		t.Fatalf("ApplyStream: %+v, %v: want a refusal naming the registration", rep, err)
	}
	if got := applied(t, in); len(got) != 0 {
		t.Errorf("applied %v", got)
	}
	if srcs, err := in.Sources(ctx); err != nil || len(srcs) != 0 {
		t.Errorf("positions %+v, %v: want none", srcs, err)
	}
}
