// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestAppendRefusesALineWhoseKeyIsNotItsRowsBeforePublishingAnything: a builder that writes the wrong
// key must not make an event vanish as a "duplicate" of another; the whole batch stays out.
func TestAppendRefusesALineWhoseKeyIsNotItsRowsBeforePublishingAnything(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m)
		line := func(run string, seq int64) []byte {
			return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d}`, run, seq)
		}
		for _, tc := range []struct {
			name string
			bad  outbox.EventLine
			want []string
		}{
			{"another run", outbox.EventLine{Seq: 2, Line: line("b", 2)}, []string{`run "a", seq 2`, `says run "b", seq 2`}},
			{"another seq", outbox.EventLine{Seq: 2, Line: line("a", 1)}, []string{`run "a", seq 2`, `says run "a", seq 1`}},
			{"not a journal line", outbox.EventLine{Seq: 2, Line: []byte(`[1]`)}, []string{`run "a", seq 2`, "malformed"}},
			{"a newline", outbox.EventLine{Seq: 2, Line: []byte("{\"engine_run_id\":\"a\",\n\"seq\":2}")}, []string{`run "a", seq 2`, "newline"}},
		} {
			batch := []outbox.EventLine{{Seq: 1, Line: line("a", 1)}, tc.bad, {Seq: 3, Line: line("a", 3)}}
			err := s.Append(ctx, "a", batch)
			if !errors.Is(err, jetstream.ErrLineKey) || !errors.Is(err, outbox.ErrSinkRefused) {
				t.Errorf("%s: %v, want ErrLineKey and ErrSinkRefused", tc.name, err)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q does not say %q", tc.name, err, w)
				}
			}
		}
		if err := s.Append(ctx, "a", []outbox.EventLine{{Seq: 1, Line: line("a", 1)}, {Seq: 3, Line: line("a", 3)}}); !errors.Is(err, jetstream.ErrGap) {
			t.Errorf("a batch that skips a seq: %v, want ErrGap", err)
		}
		if rep := verify(t, js); rep.Lines != 0 {
			t.Errorf("the stream holds %d lines of refused batches", rep.Lines)
		}
	})
}

// TestDistinctRunIDsGetDistinctSubjectsAndMsgIDs: nats.go trims whitespace from header values and
// turns CR and LF into spaces, and a dot or wildcard in a subject changes its meaning; ids that differ
// only there must still be different runs, in the stream and in the duplicate window.
func TestDistinctRunIDsGetDistinctSubjectsAndMsgIDs(t *testing.T) {
	ids := []string{"a", " a", "a ", "a\r", "a\n", "a\t", "a\x00", "a.b", "a*", "a>", "a~20", "a:1", "\xff", "\xfe", "rün", "A"}
	subjects, msgIDs := map[string]string{}, map[string]string{}
	js, s := setup(t, time.Minute, atomicBatches)
	for _, id := range ids {
		subj, msgID := s.Subject(id), jetstream.MsgID(id, 1)
		for _, c := range subj[len("outbox."):] + msgID {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_~:", c)) {
				t.Errorf("%q: subject %q or Msg-Id %q holds %q", id, subj, msgID, c)
			}
		}
		if other, ok := subjects[subj]; ok {
			t.Errorf("%q and %q share the subject %q", id, other, subj)
		}
		if other, ok := msgIDs[msgID]; ok {
			t.Errorf("%q and %q share the Msg-Id %q", id, other, msgID)
		}
		subjects[subj], msgIDs[msgID] = id, id
	}
	// Through the server, inside one duplicate window: every run keeps its own two lines.
	ctx := context.Background()
	for _, id := range ids {
		if !utf8.ValidString(id) {
			continue // a journal line cannot name it: JSON has no invalid UTF-8
		}
		name, _ := json.Marshal(id)
		ls := []outbox.EventLine{}
		for seq := int64(1); seq <= 2; seq++ {
			ls = append(ls, outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%s,"seq":%d}`, name, seq)})
		}
		if err := s.Append(ctx, id, ls); err != nil {
			t.Errorf("run %q: %v", id, err)
		}
	}
	rep := verify(t, js)
	for _, id := range ids {
		if utf8.ValidString(id) && rep.Runs[id].Lines != 2 {
			t.Errorf("run %q: %+v in the stream, want 2 lines", id, rep.Runs[id])
		}
	}
}

// TestARunIDPastTheServersLimitsIsRefusedAndTheConnectionStaysUsable: a subject past the server's max
// control line makes it close the connection, taking every other run's publications with it.
func TestARunIDPastTheServersLimitsIsRefusedAndTheConnectionStaysUsable(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Minute, m, func(o *server.Options) { o.MaxPayload = 8 << 10 })
		long := strings.Repeat("r", 4<<10)
		err := s.Append(ctx, long, lines(long, 1, 2, "x"))
		if !errors.Is(err, jetstream.ErrTooLarge) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("a 4 KiB run id: %v, want ErrTooLarge", err)
		}
		big := lines("big", 1, 2, strings.Repeat("x", 9<<10))
		if err := s.Append(ctx, "big", big); !errors.Is(err, jetstream.ErrTooLarge) || !strings.Contains(err.Error(), "seq 1") {
			t.Errorf("a line past the server's max payload: %v, want ErrTooLarge naming seq 1", err)
		}
		if err := s.Append(ctx, "other", lines("other", 1, 3, "x")); err != nil {
			t.Errorf("another run after the refusals: %v", err)
		}
		if rec := js.Conn().Stats().Reconnects; rec != 0 {
			t.Errorf("the connection was lost %d times", rec)
		}
		if rep := verify(t, js); rep.Lines != 3 {
			t.Errorf("stream: %+v, want the other run's 3 lines", rep)
		}
	})
}

// TestADuplicateAnswerForALineTheStreamDoesNotHoldIsARefusal: the run's lines were purged inside the
// duplicate window, so the server answers "duplicate" for a line it no longer holds. The sink reads the
// run back once, finds nothing, and refuses instead of asking again until the window passes.
func TestADuplicateAnswerForALineTheStreamDoesNotHoldIsARefusal(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, time.Hour, m)
		if err := s.Append(ctx, "r", lines("r", 1, 3, "x")); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		err = sink(t, js).Append(ctx, "r", lines("r", 1, 3, "x"))
		if !errors.Is(err, jetstream.ErrConflict) || !errors.Is(err, outbox.ErrSinkRefused) || !strings.Contains(err.Error(), "duplicate") {
			t.Errorf("re-sending purged lines inside the window: %v, want a refusal naming the duplicate", err)
		}
		if rep := verify(t, js); rep.Lines != 0 {
			t.Errorf("stream: %+v", rep)
		}
	})
}

// TestVerifyTreatsAMessageHoldingANewlineAsMalformed: written out by WriteLines it would be two lines.
func TestVerifyTreatsAMessageHoldingANewlineAsMalformed(t *testing.T) {
	ctx := context.Background()
	js, _ := setup(t, time.Minute, atomicBatches)
	if _, err := js.Publish(ctx, "outbox.r", []byte("{\"engine_run_id\":\"r\",\n\"seq\":1}")); err != nil {
		t.Fatal(err)
	}
	_, err := jetstream.Verify(ctx, js, "EVENTS")
	var ve *journal.Error
	if !errors.As(err, &ve) || !errors.Is(err, journal.ErrMalformed) || ve.Line != 1 ||
		!strings.Contains(err.Error(), "newline") || !strings.Contains(err.Error(), "outbox.r, stream sequence 1") {
		t.Errorf("Verify: %v, want malformed naming the newline, subject and sequence", err)
	}
	if _, err := jetstream.WriteLines(ctx, js, "EVENTS", new(strings.Builder)); !errors.Is(err, journal.ErrMalformed) {
		t.Errorf("WriteLines of a message holding a newline: %v", err)
	}
}

func TestVerifyRefusesAMessageWhoseRunIsNotItsSubjects(t *testing.T) {
	ctx := context.Background()
	js, s := setup(t, time.Minute, atomicBatches)
	if err := s.Append(ctx, "a", lines("a", 1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, s.Subject("a"), lines("b", 1, 1, "x")[0].Line); err != nil {
		t.Fatal(err)
	}
	rep, err := jetstream.Verify(ctx, js, "EVENTS")
	var ve *journal.Error
	if !errors.As(err, &ve) || !errors.Is(err, journal.ErrMalformed) || ve.Line != 2 || ve.Run != "b" || rep.Lines != 1 ||
		!strings.Contains(err.Error(), "subject outbox.a, stream sequence 2") {
		t.Errorf("Verify: (%+v, %v), want malformed naming subject and sequence", rep, err)
	}
}

// TestVerifyWithASubjectPrefixRefusesAStreamOrALineOutsideIt: the stream must capture <prefix>.>,
// and a line under another prefix is not one a sink with this prefix placed.
func TestVerifyWithASubjectPrefixRefusesAStreamOrALineOutsideIt(t *testing.T) {
	ctx := context.Background()
	js, s := setup(t, time.Minute, atomicBatches) // the stream EVENTS captures outbox.>
	if err := s.Append(ctx, "a", lines("a", 1, 2, "x")); err != nil {
		t.Fatal(err)
	}
	if rep, err := jetstream.Verify(ctx, js, "EVENTS", jetstream.WithSubjectPrefix("outbox")); err != nil || rep.Lines != 2 {
		t.Errorf("Verify with the stream's prefix: (%+v, %v)", rep, err)
	}
	if _, err := jetstream.Verify(ctx, js, "EVENTS", jetstream.WithSubjectPrefix("books")); !errors.Is(err, jetstream.ErrStreamSettings) ||
		!strings.Contains(err.Error(), "do not capture books.>") {
		t.Errorf("Verify with another prefix: %v, want ErrStreamSettings", err)
	}
	if _, err := jetstream.Verify(ctx, js, "EVENTS", jetstream.WithSubjectPrefix("bad prefix")); err == nil {
		t.Error("Verify with an invalid prefix: no error")
	}
	// A line published under the stream's prefix, one token too deep.
	if _, err := js.Publish(ctx, "outbox.x.a", lines("a", 3, 3, "x")[0].Line); err != nil {
		t.Fatal(err)
	}
	_, err := jetstream.Verify(ctx, js, "EVENTS", jetstream.WithSubjectPrefix("outbox"))
	var ve *journal.Error
	if !errors.As(err, &ve) || !errors.Is(err, journal.ErrMalformed) || ve.Line != 3 || !strings.Contains(err.Error(), "the subject is not outbox.<run>") {
		t.Errorf("Verify of a line outside the prefix: %v", err)
	}
	if _, err := jetstream.Verify(ctx, js, "EVENTS"); err != nil {
		t.Errorf("Verify without a prefix checks any subject: %v", err)
	}
}

// TestCancellingAppendAtAnyMomentLeavesNoGapAndNoDuplicate: a relay's context may end at any point of
// an Append: before the publication, while the batch is sent, while its acknowledgement is awaited,
// while lines are read back. The next Append with a live context must still place every line once.
func TestCancellingAppendAtAnyMomentLeavesNoGapAndNoDuplicate(t *testing.T) {
	forModes(t, func(t *testing.T, m mode) {
		ctx := context.Background()
		js, s := setup(t, 100*time.Millisecond, m)
		next, cancelled := int64(1), 0
		for i := 0; i < 60; i++ {
			// The batch starts at or before the next line: a re-delivery of what may have landed.
			from := max(1, next-int64(i%3))
			short, cancel := context.WithTimeout(ctx, time.Duration(i%16)*500*time.Microsecond)
			err := s.Append(short, "r", lines("r", from, next+7, "x"))
			cancel()
			switch {
			case err == nil:
				next += 8
			case errors.Is(err, outbox.ErrSinkRefused):
				t.Fatalf("append %d cancelled: %v, a refusal", i, err)
			default:
				cancelled++
			}
		}
		if err := s.Append(ctx, "r", lines("r", 1, next+7, "x")); err != nil {
			t.Fatalf("the final append: %v", err)
		}
		if rep := verify(t, js); rep.Lines != int(next+7) || rep.Runs["r"].Last != next+7 || rep.Duplicates != 0 {
			t.Errorf("after %d cancelled appends: %+v, want %d lines once each", cancelled, rep, next+7)
		}
		t.Logf("%d of 60 appends cancelled", cancelled)
	})
}
