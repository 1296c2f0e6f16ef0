// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
)

// consumeSetup starts a server with the stream EVENTS on outbox.> (through CreateStream) and opens an
// inbox with a table "applied" that insertHandler writes one row per line into.
func consumeSetup(t *testing.T, opts ...inbox.Option) (*natsServer, njs.JetStream, *inbox.Inbox) {
	t.Helper()
	ns := startServer(t)
	js := ns.connect(t)
	stream(t, js, time.Minute, atomicBatches)
	return ns, js, openInbox(t, filepath.Join(t.TempDir(), "platform.db"), opts...)
}

func openInbox(t *testing.T, path string, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	in, err := inbox.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	err = in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE IF NOT EXISTS applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// insertHandler writes each event into the consumer's table; its primary key refuses a line applied
// twice.
func insertHandler(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq, line) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, ev.Line)
	return err
}

// applied returns, per run, the seqs the consumer's table holds, in order.
func applied(t *testing.T, in *inbox.Inbox) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		rows, err := tx.Query(`SELECT run, seq FROM applied ORDER BY run, seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var run string
			var seq int64
			if err := rows.Scan(&run, &seq); err != nil {
				return err
			}
			out[run] = append(out[run], seq)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// jline is run's journal line seq, with kind to tell two versions apart.
func jline(run string, seq int64, kind string) []byte {
	return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":%q}`, run, seq, kind)
}

// publishRaw publishes data on run's subject as it is, without the sink's checks: what a stream
// may hold whatever published it. It returns the stream sequence.
func publishRaw(t *testing.T, js njs.JetStream, run string, data []byte) uint64 {
	t.Helper()
	ack, err := js.Publish(context.Background(), "outbox."+jetstream.Token(run), data)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// publishRun publishes run's lines from..to, one message each.
func publishRun(t *testing.T, js njs.JetStream, run string, from, to int64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		publishRaw(t, js, run, jline(run, seq, "x"))
	}
}

func applyStream(t *testing.T, js njs.JetStream, in *inbox.Inbox, opts ...jetstream.ConsumeOption) inbox.Report {
	t.Helper()
	rep, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, insertHandler, opts...)
	if err != nil {
		t.Fatalf("ApplyStream: %v", err)
	}
	return rep
}

// streamPosition returns the position the inbox holds for the stream EVENTS with the default filter.
func streamPosition(t *testing.T, in *inbox.Inbox) *jetstream.StreamPosition {
	t.Helper()
	pos, err := in.SourcePosition(context.Background(), jetstream.StreamSourceName("EVENTS", jetstream.DefaultPrefix))
	if err != nil {
		t.Fatal(err)
	}
	if pos == nil {
		return nil
	}
	p, err := jetstream.ParseStreamPosition(pos)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestTheStreamPositionCommitsInTheSameTransactionAsTheEffects(t *testing.T) {
	_, js, in := consumeSetup(t, inbox.WithBatchLines(4))
	publishRun(t, js, "a", 1, 10)
	// The handler fails on seq 7, in the second batch (5..8): the first batch stands with its
	// position, nothing of the second is stored, neither effects nor position.
	fail := errors.New("handler down")
	_, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 7 {
			return fail
		}
		return insertHandler(ctx, tx, ev)
	})
	if !errors.Is(err, fail) {
		t.Fatalf("ApplyStream: %v, want the handler's error", err)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 4 {
		t.Errorf("position after a failed batch: %v, want stream sequence 4", p)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 4)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	rep := applyStream(t, js, in)
	if rep != (inbox.Report{Applied: 6}) {
		t.Errorf("second call: %+v, want the 6 lines after the position applied", rep)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 10 {
		t.Errorf("position: %v, want stream sequence 10", p)
	}
}

func TestARestartResumesFromThePositionPlusOneWithAnOrderedConsumerLeavingNothingOnTheServer(t *testing.T) {
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 5)
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 5}) {
		t.Fatalf("first call: %+v", rep)
	}
	publishRun(t, js, "a", 6, 8)
	publishRun(t, js, "b", 1, 2)
	// No duplicate: the second call read from stream sequence 6, not from the start.
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 5}) {
		t.Errorf("second call: %+v, want only the 5 new lines read", rep)
	}
	if rep := applyStream(t, js, in); rep != (inbox.Report{}) {
		t.Errorf("third call: %+v, want nothing read", rep)
	}
	st, err := js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers left on the server", n)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 8), "b": seqs(1, 2)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestAStreamWhoseFirstSequenceIsAboveThePositionStopsWithARetentionGap(t *testing.T) {
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 5)
	applyStream(t, js, in)
	publishRun(t, js, "a", 6, 10) // stream sequences 6..10
	st, err := js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background(), njs.WithPurgeSequence(8)); err != nil { // removes 1..7
		t.Fatal(err)
	}
	for range 2 {
		rep, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, insertHandler)
		var gap *jetstream.RetentionGapError
		if !errors.Is(err, jetstream.ErrRetentionGap) || !errors.As(err, &gap) {
			t.Fatalf("ApplyStream: %v, want a retention gap", err)
		}
		if gap.Position != 5 || gap.FirstSeq != 8 || !strings.Contains(err.Error(), "5") || !strings.Contains(err.Error(), "8") {
			t.Errorf("gap %+v (%v): want position 5 and first sequence 8, both named", gap, err)
		}
		if rep != (inbox.Report{}) {
			t.Errorf("report %+v: want nothing applied", rep)
		}
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 5 {
		t.Errorf("position %v, want it left at 5", p)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 5)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestWithAcceptRetentionGapReadsOnAndTheRunsOwnGapsQuarantineThem(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 3) // 1..3
	applyStream(t, js, in)
	publishRun(t, js, "a", 4, 5) // 4..5, removed
	publishRun(t, js, "b", 1, 1) // 6, removed
	publishRun(t, js, "a", 6, 6) // 7
	publishRun(t, js, "c", 1, 2) // 8..9
	st, _ := js.Stream(ctx, "EVENTS")
	if err := st.Purge(ctx, njs.WithPurgeSequence(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); !errors.Is(err, jetstream.ErrRetentionGap) {
		t.Fatalf("without the option: %v", err)
	}
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler, jetstream.WithAcceptRetentionGap())
	if err != nil {
		t.Fatal(err)
	}
	if rep != (inbox.Report{Applied: 2, Quarantined: 1}) {
		t.Errorf("report %+v: want c applied, a quarantined", rep)
	}
	q, err := in.Quarantined(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 1 || q[0].RunID != "a" || q[0].Reason != "gap" || q[0].Expected != 4 || q[0].Got != 6 {
		t.Errorf("quarantines %+v: want run a, gap 4..5", q)
	}
	// Accepted once: the position is past the gap, and the next call needs no option.
	publishRun(t, js, "c", 3, 3)
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 1}) {
		t.Errorf("after the accepted gap: %+v", rep)
	}
}

func TestARunWhoseLinesWereAllRemovedIsNamedInTheRetentionGapError(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "gone", 1, 2) // 1..2
	publishRun(t, js, "kept", 1, 1) // 3
	applyStream(t, js, in)
	publishRun(t, js, "gone", 3, 4) // 4..5: lost with the run's every line
	publishRun(t, js, "kept", 2, 2) // 6
	st, _ := js.Stream(ctx, "EVENTS")
	if err := st.Purge(ctx, njs.WithPurgeSequence(6)); err != nil {
		t.Fatal(err)
	}
	_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
	var gap *jetstream.RetentionGapError
	if !errors.As(err, &gap) {
		t.Fatalf("ApplyStream: %v, want a retention gap", err)
	}
	if diff := cmp.Diff([]string{"gone"}, gap.RunsGone); diff != "" || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("runs named (-want +got):\n%s\n%v", diff, err)
	}
}

func TestAMessageDeletedFromTheMiddleIsAGapOnlyForItsRun(t *testing.T) {
	for _, batchLines := range []int{1, 100} { // the hole between two batches, and inside one
		t.Run(fmt.Sprintf("batches of %d", batchLines), func(t *testing.T) {
			ctx := context.Background()
			_, js, in := consumeSetup(t, inbox.WithBatchLines(batchLines))
			publishRun(t, js, "a", 1, 1) // 1
			publishRun(t, js, "b", 1, 1) // 2
			publishRun(t, js, "a", 2, 2) // 3
			publishRun(t, js, "b", 2, 2) // 4, deleted: b's gap
			publishRun(t, js, "a", 3, 3) // 5
			publishRun(t, js, "c", 1, 1) // 6, deleted: c's first line, no gap of anyone's (nothing of c follows)
			publishRun(t, js, "b", 3, 3) // 7
			publishRun(t, js, "a", 4, 4) // 8
			st, _ := js.Stream(ctx, "EVENTS")
			for _, seq := range []uint64{4, 6} {
				if err := st.DeleteMsg(ctx, seq); err != nil {
					t.Fatal(err)
				}
			}
			rep := applyStream(t, js, in)
			if rep != (inbox.Report{Applied: 5, Quarantined: 1}) {
				t.Errorf("report %+v", rep)
			}
			if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 4), "b": seqs(1, 1)}, applied(t, in)); diff != "" {
				t.Errorf("effects (-want +got):\n%s", diff)
			}
			q, _ := in.Quarantined(ctx)
			if len(q) != 1 || q[0].RunID != "b" || q[0].Reason != "gap" {
				t.Errorf("quarantines %+v, want b's gap", q)
			}
		})
	}
}

func TestReDeliveredLinesAreDuplicatesByTheirBytes(t *testing.T) {
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 3)
	publishRun(t, js, "a", 2, 3) // a relay's batch sent again
	publishRun(t, js, "a", 4, 4)
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 4, Duplicates: 2}) {
		t.Errorf("report %+v", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 4)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestAConflictingMessageQuarantinesItsRunAndTheOthersGoOn(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 2)
	publishRaw(t, js, "a", jline("a", 2, "other bytes"))
	publishRun(t, js, "b", 1, 2)
	publishRun(t, js, "a", 3, 3)
	if rep := applyStream(t, js, in); rep != (inbox.Report{Applied: 4, Quarantined: 2}) {
		t.Errorf("report %+v", rep)
	}
	q, _ := in.Quarantined(ctx)
	if len(q) != 1 || q[0].RunID != "a" || q[0].Reason != "conflict" {
		t.Errorf("quarantines %+v, want a's conflict", q)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 2), "b": seqs(1, 2)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
}

func TestAMalformedMessageStopsTheSourceNamingItsSubjectAndStreamSequence(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		run  string // the subject's
	}{
		{"not a journal line", []byte("not json"), "a"},
		{"a newline inside", []byte(`{"engine_run_id":"a","seq":2,"type":"x"}` + "\n" + `{"engine_run_id":"a","seq":3,"type":"x"}`), "a"},
		{"another run's line", jline("b", 1, "x"), "a"},
		{"longer than the line limit", []byte(`{"engine_run_id":"a","seq":2,"type":"` + strings.Repeat("x", 300) + `"}`), "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, js, in := consumeSetup(t, inbox.WithMaxLineSize(256))
			publishRun(t, js, "a", 1, 1)
			bad := publishRaw(t, js, c.run, c.data)
			publishRun(t, js, "a", 2, 3)
			for range 2 {
				_, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler)
				want := fmt.Sprintf("subject outbox.%s, stream sequence %d", c.run, bad)
				if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), want) {
					t.Errorf("ApplyStream: %v, want journal.ErrMalformed naming %q", err, want)
				}
				if p := streamPosition(t, in); p == nil || p.Seq != bad-1 {
					t.Errorf("position %v, want the one before the message, %d", p, bad-1)
				}
			}
			if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 1)}, applied(t, in)); diff != "" {
				t.Errorf("effects (-want +got):\n%s", diff)
			}
		})
	}
}

// After a Release the source reads the stream again from its start, but the retention gap it
// reported before is still reported: the position it was rewound from is the floor of the check.
// The operator's acceptance reads on from the first message held, and the line the purge took is a
// gap of its own run's.
func TestAfterReleaseTheSourceStillReportsTheRetentionGapItReportedBefore(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	publishRun(t, js, "a", 1, 2) // 1..2
	publishRun(t, js, "b", 1, 1) // 3
	publishRun(t, js, "b", 3, 3) // 4: b's gap, quarantined
	applyStream(t, js, in)
	publishRun(t, js, "a", 3, 3) // 5, removed unread
	publishRun(t, js, "a", 4, 4) // 6
	st, _ := js.Stream(ctx, "EVENTS")
	if err := st.Purge(ctx, njs.WithPurgeSequence(6)); err != nil { // the operator removes 1..5
		t.Fatal(err)
	}
	if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); !errors.Is(err, jetstream.ErrRetentionGap) {
		t.Fatalf("before the Release: %v, want a retention gap", err)
	}
	publishRun(t, js, "b", 2, 3) // 7..8: b's missing line, and the one after it again
	if err := in.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if p := streamPosition(t, in); p != nil {
		t.Fatalf("position after Release: %v, want none", p)
	}
	if _, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler); !errors.Is(err, jetstream.ErrRetentionGap) {
		t.Fatalf("after the Release: %v, want the retention gap still", err)
	}
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, insertHandler, jetstream.WithAcceptRetentionGap())
	if err != nil {
		t.Fatalf("ApplyStream accepting the gap: %v", err)
	}
	if rep != (inbox.Report{Applied: 2, Quarantined: 1}) {
		t.Errorf("report %+v", rep)
	}
	if diff := cmp.Diff(map[string][]int64{"a": seqs(1, 2), "b": seqs(1, 3)}, applied(t, in)); diff != "" {
		t.Errorf("effects (-want +got):\n%s", diff)
	}
	q, _ := in.Quarantined(ctx)
	if len(q) != 1 || q[0].RunID != "a" || q[0].Expected != 3 || q[0].Got != 4 {
		t.Errorf("quarantines %+v, want a's gap at seq 3", q)
	}
	if p := streamPosition(t, in); p == nil || p.Seq != 8 {
		t.Errorf("position %v, want 8", p)
	}
}

func TestBatchesAreBoundedByTheInboxsBatchOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []inbox.Option
		want int // transactions for 10 lines of 41 or 42 bytes
	}{
		{"lines", []inbox.Option{inbox.WithBatchLines(3)}, 4},
		{"bytes", []inbox.Option{inbox.WithMaxLineSize(64), inbox.WithBatchBytes(100)}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, js, in := consumeSetup(t, c.opts...)
			publishRun(t, js, "a", 1, 10)
			txs := map[*sql.Tx]bool{}
			var mu sync.Mutex
			_, err := jetstream.ApplyStream(context.Background(), js, "EVENTS", in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				mu.Lock()
				txs[tx] = true
				mu.Unlock()
				return insertHandler(ctx, tx, ev)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(txs) != c.want {
				t.Errorf("%d transactions, want %d", len(txs), c.want)
			}
		})
	}
}
