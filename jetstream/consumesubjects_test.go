// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
)

func TestAStreamThatDoesNotCaptureThePrefixIsRefusedAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "OTHER", Subjects: []string{"foo.>"}, Storage: njs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "foo.a", jline("a", 1, "x")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stream   string
		opts     []jetstream.ConsumeOption
		settings bool
	}{
		{"OTHER", nil, true},
		{"EVENTS", []jetstream.ConsumeOption{jetstream.WithSubjectPrefix("nope")}, true},
		{"EVENTS", []jetstream.ConsumeOption{jetstream.WithSubjectPrefix("bad prefix")}, false},
		{"MISSING", nil, false},
	} {
		rep, err := jetstream.ApplyStream(ctx, js, c.stream, in, insertHandler, c.opts...)
		t.Logf("%s %d opts: %+v %v", c.stream, len(c.opts), rep, err)
		if err == nil || rep != (inbox.Report{}) {
			t.Errorf("stream %s with %d options: %+v, %v", c.stream, len(c.opts), rep, err)
		}
		if c.settings && !errors.Is(err, jetstream.ErrStreamSettings) {
			t.Errorf("stream %s: %v, want ErrStreamSettings", c.stream, err)
		}
	}
	// A bound for a FollowStream that would not stop, not the refusal's: on a loaded machine the
	// refusal may take longer than a short bound, which would then be what the test saw.
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := jetstream.FollowStream(fctx, js, "OTHER", in, insertHandler); !errors.Is(err, jetstream.ErrStreamSettings) {
		t.Errorf("FollowStream on OTHER: %v, want ErrStreamSettings at once", err)
	}
	srcs, err := in.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 0 {
		t.Fatalf("refused calls left positions: %+v", srcs)
	}
}

func TestTwoStreamsCarryingTheSameLinesApplyEachOnce(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	if _, err := jetstream.CreateStream(ctx, js, "COPY", jetstream.WithSubjectPrefix("copy")); err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 1, 5)
	for s := int64(1); s <= 7; s++ {
		if _, err := js.Publish(ctx, "copy."+jetstream.Token("a"), jline("a", s, "x")); err != nil {
			t.Fatal(err)
		}
	}
	r1 := applyStream(t, js, in)
	r2, err := jetstream.ApplyStream(ctx, js, "COPY", in, insertHandler, jetstream.WithSubjectPrefix("copy"))
	if err != nil {
		t.Fatal(err)
	}
	if r1 != (inbox.Report{Applied: 5}) || r2 != (inbox.Report{Applied: 2, Duplicates: 5}) {
		t.Fatalf("%+v %+v", r1, r2)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 7)}, applied(t, in)); diff != "" {
		t.Fatal(diff)
	}
}

func TestAMirrorOfTheStreamIsReadThoughItHasNoSubjectsOfItsOwn(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 4)
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "MIRROR", Storage: njs.FileStorage,
		Mirror: &njs.StreamSource{Name: "EVENTS"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	for {
		s, err := js.Stream(ctx, "MIRROR")
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().State.Msgs == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mirror did not catch up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := jetstream.ApplyStream(ctx, js, "MIRROR", in, insertHandler)
	if err != nil || rep != (inbox.Report{Applied: 4}) {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestAMessageOnASubjectNoSinkPublishesStopsTheSource(t *testing.T) {
	for _, c := range []struct {
		name, subject string
		data          []byte
	}{
		{"two tokens after the prefix", "outbox.x.b", jline("b", 1, "x")},
		{"a token that is not Token's", "outbox.b~zz", jline("b", 1, "x")},
		{"an upper-case escape", "outbox.a~2Eb", jline("a.b", 1, "x")},
		{"an empty payload", "outbox.b", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, js, in := consumeSetup(t)
			if _, err := js.Publish(ctx, c.subject, c.data); err != nil {
				t.Fatal(err)
			}
			rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
			if !errors.Is(err, journal.ErrMalformed) {
				t.Fatalf("ApplyStream: %+v, %v, want journal.ErrMalformed", rep, err)
			}
			if len(applied(t, in)) != 0 {
				t.Fatalf("applied %v", applied(t, in))
			}
		})
	}
}
