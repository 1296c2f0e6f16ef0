// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"
)

func TestStreamTrimRemovesWhatTheRegisteredReaderAppliedAndReadersShowsItsLag(t *testing.T) {
	url, js, _, _ := streamConsumer(t) // the reader applied 1..3 of 5
	code, out, errOut := cli(t, "stream", "readers", "--nats", url, "--stream", "EVENTS")
	if code != exitOK || !strings.Contains(out, "seq 3\tlag 2") {
		t.Fatalf("stream readers: exit %d, %q, %q: want the reader at 3, lag 2", code, out, errOut)
	}
	code, out, errOut = cli(t, "stream", "trim", "--nats", url, "--stream", "EVENTS", "--keep", "0")
	if code != exitOK || !strings.Contains(out, "removed 3 lines of 1 run") {
		t.Fatalf("stream trim: exit %d, %q, %q: want 3 lines removed", code, out, errOut)
	}
	st, err := js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if s := st.CachedInfo().State; s.FirstSeq != 4 || s.Msgs != 2 {
		t.Errorf("stream first %d, %d messages: want 4 and 2", s.FirstSeq, s.Msgs)
	}
}

func TestStreamTrimsCapLogsAnErrorNamingTheReaderLeftBehind(t *testing.T) {
	url, _, _, _ := streamConsumer(t)
	code, out, errOut := cli(t, "stream", "trim", "--nats", url, "--stream", "EVENTS", "--max-bytes", "1")
	if code != exitOK || !strings.Contains(out, "readers left behind: inbox-consumer.db") ||
		!strings.Contains(errOut, "level=ERROR") || !strings.Contains(errOut, "inbox-consumer.db") {
		t.Fatalf("stream trim: exit %d, %q, %q: want the reader named left behind, at level ERROR", code, out, errOut)
	}
}

func TestStreamTrimRefusesANegativeKeep(t *testing.T) {
	if code, _, errOut := cli(t, "stream", "trim", "--nats", "nats://127.0.0.1:1", "--stream", "EVENTS", "--keep", "-1s"); code != exitUsage || !strings.Contains(errOut, "--keep") {
		t.Errorf("exit %d, %q: want a usage error naming --keep", code, errOut)
	}
}

func TestInboxStatsSaysWhatTheStreamsCapTookFromAReader(t *testing.T) {
	url, _, _, dbPath := streamConsumer(t) // the reader applied 1..3 of 5
	if code, _, errOut := cli(t, "stream", "trim", "--nats", url, "--stream", "EVENTS", "--max-bytes", "1"); code != exitOK {
		t.Fatalf("stream trim: exit %d, %s", code, errOut)
	}
	got := statsSource(t, "--db", dbPath, "--nats", url)
	if sp := got.Stream; sp == nil || !sp.RetentionGap || sp.CappedBelow == nil || *sp.CappedBelow != 6 {
		t.Fatalf("the source after the cap: %+v %+v", got, got.Stream)
	}
	_, out, _ := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
	if w := "RETENTION GAP: the stream's cap removed every line below sequence 6, so sequences 4 to 5 are gone"; !strings.Contains(out, w) {
		t.Errorf("inbox stats does not say %q:\n%s", w, out)
	}
}

func TestRelayWithTrimTrimsTheStreamOnceTheBacklogIsProjected(t *testing.T) {
	ctx := context.Background()
	url, stop, err := embeddedNATS(ctx, t.TempDir(), "EVENTS", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dbPath, _ := book(t)
	code, out, errOut := cli(t, "relay", "--db", dbPath, "--nats", url, "--stream", "EVENTS", "--trim", "--keep", "0")
	// No reader is registered: the trim runs and removes nothing.
	if code != exitOK || !strings.Contains(out, "projected 3 lines") || !strings.Contains(out, "removed 0 lines of 0 runs") ||
		!strings.Contains(out, "readers: none registered") {
		t.Fatalf("relay --trim: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "relay", "--db", dbPath, "--journal", "j", "--trim"); code != exitUsage || !strings.Contains(errOut, "--trim") {
		t.Errorf("relay --trim without a stream: exit %d %q, want a usage error naming --trim", code, errOut)
	}
}

func TestStreamReadersShowsTheStreamsSizeAndWhatTheCapTookFromAReader(t *testing.T) {
	url, _, _, _ := streamConsumer(t) // the reader applied 1..3 of 5
	if code, _, errOut := cli(t, "stream", "trim", "--nats", url, "--stream", "EVENTS", "--max-bytes", "1"); code != exitOK {
		t.Fatalf("stream trim: exit %d, %s", code, errOut)
	}
	code, out, errOut := cli(t, "stream", "readers", "--nats", url, "--stream", "EVENTS")
	for _, w := range []string{"stream EVENTS: 0 messages, 0 bytes, last sequence 5",
		"the cap removed every line below stream sequence 6", "seq 3\tlag 2",
		"RETENTION GAP: the cap removed sequences 4 to 5 before it applied them"} {
		if code != exitOK || !strings.Contains(out, w) {
			t.Errorf("stream readers: exit %d, %s: does not say %q:\n%s", code, errOut, w, out)
		}
	}
}
