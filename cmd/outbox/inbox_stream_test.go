// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/jetstream"
)

// streamSourceName is the inbox source of stream EVENTS through the default subject filter.
var streamSourceName = jetstream.StreamSourceName("EVENTS", jetstream.DefaultPrefix)

// streamConsumer starts a server with stream EVENTS holding run a's lines 1..5, and a consumer's
// database that applied the first three of them with ApplyStream. It returns the server's URL, a
// JetStream context on it, a function that stops the server, and the database's path, closed.
func streamConsumer(t *testing.T) (url string, js njs.JetStream, stop func(), dbPath string) {
	t.Helper()
	ctx := context.Background()
	url, stop, err := embeddedNATS(ctx, t.TempDir(), "EVENTS", jetstream.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeConn)
	publish := func(from, to int64) {
		for seq := from; seq <= to; seq++ {
			if _, err := js.Publish(ctx, "outbox.a", []byte(strings.TrimSuffix(jline("a", seq, ""), "\n"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(1, 3)
	dbPath = filepath.Join(t.TempDir(), "consumer.db")
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	nothing := func(context.Context, *sql.Tx, inbox.Event) error { return nil }
	if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, nothing); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	publish(4, 5)
	return url, js, stop, dbPath
}

// statsSource runs `outbox inbox stats --json` with args and returns its one source.
func statsSource(t *testing.T, args ...string) inboxSourceRow {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"inbox", "stats", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("inbox stats %v: exit %d, %s", args, code, errOut)
	}
	var rep inboxStatsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Sources) != 1 {
		t.Fatalf("sources: %+v", rep.Sources)
	}
	return rep.Sources[0]
}

func u64(v uint64) *uint64 { return &v }

func TestInboxStatsShowsTheStreamPositionAndHowFarBehindTheStreamsLastSequenceItIs(t *testing.T) {
	url, _, _, dbPath := streamConsumer(t)
	got := statsSource(t, "--db", dbPath, "--nats", url)
	if got.Name != streamSourceName || got.BehindError != "" || got.File != nil || got.PositionHex != "" || got.Stream == nil || got.Stream.Created == nil {
		t.Fatalf("the stream's source: %+v", got)
	}
	want := &inboxStreamPosition{Stream: "EVENTS", Filter: "outbox.>", Seq: u64(3), Created: got.Stream.Created,
		LastSeq: u64(5), FirstSeq: u64(1), BehindSeqs: u64(2)}
	if diff := cmp.Diff(want, got.Stream); diff != "" {
		t.Errorf("the stream source (-want +got):\n%s", diff)
	}
	code, out, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
	if code != exitOK {
		t.Fatalf("inbox stats: exit %d, %s", code, errOut)
	}
	for _, w := range []string{"stream EVENTS (outbox.>) at sequence 3", "2 sequences behind (the stream's last is 5)"} {
		if !strings.Contains(out, w) {
			t.Errorf("inbox stats does not say %q:\n%s", w, out)
		}
	}
}

func TestInboxStatsWithoutAServerShowsTheStreamPositionAndSaysTheLagIsUnknown(t *testing.T) {
	_, _, stop, dbPath := streamConsumer(t)
	stop() // nothing to connect to: stats must not try
	got := statsSource(t, "--db", dbPath)
	if got.Stream == nil || got.Stream.Seq == nil || *got.Stream.Seq != 3 || got.Stream.LastSeq != nil || got.Stream.BehindSeqs != nil ||
		got.BehindError != errNoServer.Error() {
		t.Errorf("the stream's source without a server: %+v %+v", got, got.Stream)
	}
	code, out, _ := cli(t, "inbox", "stats", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, "at sequence 3") || !strings.Contains(out, "unknown: no server given") {
		t.Errorf("inbox stats: exit %d\n%s", code, out)
	}
	// Given a server that is not there, it says so and exits 2, rather than printing a lag it
	// could not read.
	if code, _, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--nats", "nats://127.0.0.1:1"); code != exitUsage || !strings.Contains(errOut, "connect") {
		t.Errorf("inbox stats against no server: exit %d, %q", code, errOut)
	}
}

func TestInboxStatsSaysARetentionGapPlainly(t *testing.T) {
	ctx := context.Background()
	t.Run("purged", func(t *testing.T) {
		url, js, _, dbPath := streamConsumer(t)
		st, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		// Messages 4 and 5, never applied, are removed; a new one comes as 6.
		if err := st.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "outbox.a", []byte(strings.TrimSuffix(jline("a", 6, ""), "\n"))); err != nil {
			t.Fatal(err)
		}
		got := statsSource(t, "--db", dbPath, "--nats", url)
		if sp := got.Stream; sp == nil || !sp.RetentionGap || sp.Recreated || *sp.FirstSeq != 6 || *sp.LastSeq != 6 || *sp.BehindSeqs != 3 {
			t.Errorf("a purged stream's source: %+v %+v", got, got.Stream)
		}
		_, out, _ := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
		if w := "RETENTION GAP: the stream's first sequence is 6, so sequences 4 to 5 are gone"; !strings.Contains(out, w) {
			t.Errorf("inbox stats does not say %q:\n%s", w, out)
		}
	})
	t.Run("created again", func(t *testing.T) {
		url, js, _, dbPath := streamConsumer(t)
		if err := js.DeleteStream(ctx, "EVENTS"); err != nil {
			t.Fatal(err)
		}
		if _, err := jetstream.CreateStream(ctx, js, "EVENTS"); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 4; seq++ {
			if _, err := js.Publish(ctx, "outbox.b", []byte(strings.TrimSuffix(jline("b", seq, ""), "\n"))); err != nil {
				t.Fatal(err)
			}
		}
		// By sequences alone it would look one behind; the stream is another one.
		got := statsSource(t, "--db", dbPath, "--nats", url)
		if sp := got.Stream; sp == nil || !sp.RetentionGap || !sp.Recreated || sp.BehindSeqs != nil {
			t.Errorf("a re-created stream's source: %+v %+v", got, got.Stream)
		}
		_, out, _ := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
		if w := "RETENTION GAP: the stream was deleted and created again"; !strings.Contains(out, w) {
			t.Errorf("inbox stats does not say %q:\n%s", w, out)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		url, js, _, dbPath := streamConsumer(t)
		if err := js.DeleteStream(ctx, "EVENTS"); err != nil {
			t.Fatal(err)
		}
		got := statsSource(t, "--db", dbPath, "--nats", url)
		if got.Stream == nil || got.Stream.LastSeq != nil || !strings.Contains(got.BehindError, "stream EVENTS: ") ||
			!strings.Contains(got.BehindError, "not found") || strings.Contains(got.BehindError, "stream create") {
			t.Errorf("a deleted stream's source: %+v", got)
		}
	})
}

func TestInboxStatsShowsARewoundStreamSourceAsReadingTheWholeStreamAgain(t *testing.T) {
	ctx := context.Background()
	url, _, _, dbPath := streamConsumer(t)
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	// No position is what Release and AcceptGap leave.
	pos, err := in.SourcePosition(ctx, streamSourceName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFrom(ctx, streamSourceName, pos, nil, nil, consumerHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	got := statsSource(t, "--db", dbPath, "--nats", url)
	if sp := got.Stream; !got.Rewound || sp == nil || sp.Seq != nil || sp.Created != nil || *sp.BehindSeqs != 5 {
		t.Errorf("a rewound stream source: %+v %+v", got, got.Stream)
	}
	_, out, _ := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
	if w := "none, reads again from its first message"; !strings.Contains(out, w) {
		t.Errorf("inbox stats does not say %q:\n%s", w, out)
	}
}

func TestInboxStatsOfAStreamSourceIsTerminalSafeAndRefusesWhatDoesNotApply(t *testing.T) {
	ctx := context.Background()
	url, _, _, dbPath := streamConsumer(t)
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	// A source under the stream prefix that no stream source wrote: a hostile name, a position that
	// is no stream position.
	if _, err := in.ApplyFrom(ctx, inboxseam.StreamSourcePrefix+"EV\u202eIL outbox.>", nil, []byte("12 \x1b[31m"), nil, consumerHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	code, out, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--json", "--nats", url)
	var rep inboxStatsReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Sources) != 2 {
		t.Fatalf("exit %d, %s\n%s", code, errOut, out)
	}
	bad := rep.Sources[1] // after "jetstream:EVENTS" in byte order
	if bad.Stream != nil || bad.PositionHex != fmt.Sprintf("%x", "12 \x1b[31m") || !strings.Contains(bad.BehindError, "not a stream source position") {
		t.Errorf("a source holding no stream position: %+v", bad)
	}
	code, out, _ = cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	checkTerminalSafe(t, "inbox stats", out)
	// Each stream source's name holds its subject filter: the command has no --subject-prefix, in
	// its help or on its command line.
	if code, _, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url, "--subject-prefix", "other"); code != exitUsage ||
		!strings.Contains(errOut, "subject-prefix") {
		t.Errorf("--subject-prefix: exit %d, %q", code, errOut)
	}
	if _, help, _ := cli(t, "inbox", "stats", "--help"); strings.Contains(help, "subject-prefix") || !strings.Contains(help, "--nats") {
		t.Errorf("inbox stats --help lists --subject-prefix, or lacks --nats:\n%s", help)
	}
	if code, _, _ := cli(t, "inbox", "stats", "--db", dbPath, "--creds", "x"); code != exitUsage {
		t.Errorf("--creds without a server: exit %d", code)
	}
}

func TestMetricsExportTheStreamPositionOfEachStreamSource(t *testing.T) {
	_, _, stop, dbPath := streamConsumer(t)
	stop() // the exporter reads the database only
	url, stopMetrics := startMetricsWith(t, "--inbox", dbPath)
	defer stopMetrics()
	want := map[string]float64{
		`outbox_inbox_up`:               1,
		`outbox_inbox_runs`:             1,
		`outbox_inbox_quarantined_runs`: 0,
		`outbox_inbox_stream_position{source="` + streamSourceName + `"}`: 3,
		`outbox_inbox_lines_applied_total`:                                3,
		`outbox_inbox_lines_duplicates_total`:                             0,
		`outbox_inbox_lines_stale_total`:                                  0,
		`outbox_inbox_lines_quarantined_total`:                            0,
	}
	if diff := cmp.Diff(want, inboxSeries(scrape(t, url))); diff != "" {
		t.Errorf("the inbox's series (-want +got):\n%s", diff)
	}
}

func TestInboxStatsConnectsToNoServerWhenNoSourceIsAStream(t *testing.T) {
	dbPath, _ := consumerDB(t) // a file source only
	code, out, errOut := cli(t, "inbox", "stats", "--db", dbPath, "--nats", "nats://127.0.0.1:1")
	if code != exitOK || !strings.Contains(out, "1 source") {
		t.Errorf("inbox stats of file sources, given a server that is not there: exit %d, %q", code, errOut)
	}
}

func TestInboxStatsSaysAStreamThatEndsBeforeThePositionIsReadAgainFromItsStart(t *testing.T) {
	ctx := context.Background()
	url, _, _, dbPath := streamConsumer(t)
	created := statsSource(t, "--db", dbPath).Stream.Created
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := in.SourcePosition(ctx, streamSourceName)
	if err != nil {
		t.Fatal(err)
	}
	// The position of a stream that has since lost its last messages: past its last sequence.
	lost := []byte("99 " + created.UTC().Format(time.RFC3339Nano))
	if _, err := in.ApplyFrom(ctx, streamSourceName, pos, lost, nil, consumerHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	got := statsSource(t, "--db", dbPath, "--nats", url)
	if sp := got.Stream; sp == nil || !sp.ReadAgain || sp.RetentionGap || *sp.Seq != 99 || *sp.BehindSeqs != 5 {
		t.Errorf("a stream that ends before the position: %+v %+v", got, got.Stream)
	}
	_, out, _ := cli(t, "inbox", "stats", "--db", dbPath, "--nats", url)
	if w := "5 sequences: the stream ends at 5, before the position, and is read again from its start"; !strings.Contains(out, w) {
		t.Errorf("inbox stats does not say %q:\n%s", w, out)
	}
}
