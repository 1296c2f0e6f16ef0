// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// olderServerEnv names a nats-server binary of a release before atomic publish (2.12). The server
// the other tests embed is the module's own, a current release; an older one cannot live in the same
// module graph, so `make test-old-nats` builds one from the module proxy (go install
// github.com/nats-io/nats-server/v2@VERSION) and runs this test against it as a process.
const olderServerEnv = "OUTBOX_OLDER_NATS_SERVER"

// startOlderServer runs the binary olderServerEnv names on a free loopback port with JetStream in a
// directory of the test's, and returns a connection to it.
func startOlderServer(t *testing.T) (njs.JetStream, string) {
	t.Helper()
	bin := os.Getenv(olderServerEnv)
	if bin == "" {
		t.Skipf("%s is not set: make test-old-nats builds an older nats-server and runs this test against it", olderServerEnv)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir())
	var log bytes.Buffer // shown when the test fails
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("the older server's log:\n%s", log.String())
		}
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	for deadline := time.Now().Add(time.Minute); ; {
		if nc, err = nats.Connect(url); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the older server did not answer within a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, nc.ConnectedServerVersion()
}

func TestTheSinkWorksWithAnOlderServerOneLineAtATime(t *testing.T) {
	js, version := startOlderServer(t)
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil || major != 2 || minor >= 12 {
		t.Fatalf("server %q: want a release before 2.12, which has no atomic publish", version)
	}
	t.Logf("nats-server %s", version)
	ctx := context.Background()

	// The stream as CreateStream makes it: the older server does not know atomic publish, so the
	// stream it keeps has none, and CreateStream says so when asked again.
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithDuplicateWindow(time.Second)); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	s := sink(t, js)
	if s.Mode() != jetstream.OneAtATime {
		t.Fatalf("mode %v, want one at a time", s.Mode())
	}

	// In order, per run; a re-delivery of the same bytes, inside and past the duplicate window, is
	// success; other bytes are a conflict; a skipped seq is a gap.
	if err := s.Append(ctx, "a", lines("a", 1, 3, "x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "b", lines("b", 1, 2, "x")); err != nil {
		t.Fatal(err)
	}
	if err := sink(t, js).Append(ctx, "a", lines("a", 2, 4, "x")); err != nil {
		t.Errorf("a re-delivery inside the window: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // past the stream's one-second duplicate window
	if err := sink(t, js).Append(ctx, "a", lines("a", 3, 5, "x")); err != nil {
		t.Errorf("a re-delivery past the window: %v", err)
	}
	if err := sink(t, js).Append(ctx, "a", lines("a", 4, 4, "other")); !errors.Is(err, jetstream.ErrConflict) {
		t.Errorf("other bytes: %v, want ErrConflict", err)
	}
	if err := s.Append(ctx, "b", lines("b", 4, 4, "x")); !errors.Is(err, jetstream.ErrGap) {
		t.Errorf("seq 4 after 2: %v, want ErrGap", err)
	}

	// A relay from a store.
	store, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for i := range 50 {
		if _, err := store.EnqueueEvent(ctx, "c", journal.Builder("c", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Runs a and b went to the stream around this book: the start's comparison, which lists the
	// stream's subjects, tells so on the older server too, before anything is published.
	if err := outboxtest.NewRelay(t, store, sink(t, js), "c").Flush(ctx); !errors.Is(err, outbox.ErrBookBehind) {
		t.Fatalf("relay of a book that never recorded the stream's runs: %v, want ErrBookBehind", err)
	}
	if err := outboxtest.NewRelay(t, store, sink(t, js), "c", outbox.WithBatchSize(16), outbox.WithBookCheck(false)).Flush(ctx); err != nil {
		t.Fatalf("relay: %v", err)
	}
	rep := verify(t, js)
	want := map[string]journal.RunReport{"a": {Last: 5, Lines: 5}, "b": {Last: 2, Lines: 2}, "c": {Last: 50, Lines: 50}}
	if diff := cmp.Diff(want, rep.Runs); diff != "" || rep.Duplicates != 0 {
		t.Errorf("the stream (-want +got):\n%s\n%+v", diff, rep)
	}

	// The stream source reads it into an inbox: ApplyStream to its end, FollowStream what comes after.
	in := openInbox(t, filepath.Join(t.TempDir(), "platform.db"), inbox.WithPollInterval(50*time.Millisecond))
	if r, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); err != nil || r.Applied != 57 {
		t.Fatalf("ApplyStream: %+v, %v", r, err)
	}
	f := follow(t, js, in, insertHandler)
	if err := s.Append(ctx, "b", lines("b", 3, 4, "x")); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, in, map[string][]int64{"a": seqs(1, 5), "b": seqs(1, 4), "c": seqs(1, 50)})
	if err := f.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("FollowStream: %v", err)
	}
	// CreateStream at the next start finds the stream it made, and takes it as it is.
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithDuplicateWindow(time.Second)); err != nil {
		t.Errorf("CreateStream again: %v", err)
	}
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS", jetstream.WithDuplicateWindow(time.Minute)); !errors.Is(err, jetstream.ErrStreamSettings) {
		t.Errorf("CreateStream with another window: %v, want ErrStreamSettings", err)
	}
}
