// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

type orderPlaced struct {
	Order string `json:"order"`
	Cents int64  `json:"cents"`
	Note  string `json:"note,omitempty"`
}

// enqueueAll enqueues the same events to run through every enqueue method of the store, each
// builder made by mk (given the call's once key, empty for none), and returns the lines the store
// holds.
func enqueueAll(t *testing.T, s *outbox.Store, run string, mk func(run, key, typ string, data any) outbox.EventBuilder) []outbox.EventLine {
	t.Helper()
	ctx := outboxtest.Patient(t)
	v := orderPlaced{Order: "o-1", Cents: 250, Note: "<\u2028é\"\\"}
	if _, err := s.EnqueueEvent(ctx, run, mk(run, "", "order_placed", v)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnqueueOnce(ctx, run, "once-1", mk(run, "once-1", "order_done", map[string]any{"b": 1, "a": []int{1, 2}})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvents(ctx, run, []outbox.EventBuilder{mk(run, "", "x", nil), mk(run, "", "y", 7)}); err != nil {
		t.Fatal(err)
	}
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.EnqueueTx(ctx, tx, run, mk(run, "", "order_placed", &v)); err != nil {
			return err
		}
		_, _, err := s.EnqueueOnceTx(ctx, tx, run, "once-2", mk(run, "once-2", "order_done", "done"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return outboxtest.AllLines(t, s, run)
}

func TestEventAndBuilderRenderByteIdenticalLinesForTheSameInput(t *testing.T) {
	at := time.Date(2026, 12, 3, 11, 0, 0, 123456789, time.FixedZone("x", 3600))
	now = func() time.Time { return at }
	t.Cleanup(func() { now = time.Now })

	const run = "run-\u00e9-1"
	for _, group := range []bool{true, false} {
		sb, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group), outbox.WithLineCheck(CheckLine))
		se, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group), outbox.WithLineCheck(CheckLine))
		byBuilder := enqueueAll(t, sb, run, func(r, key, typ string, data any) outbox.EventBuilder {
			return Builder(r, typ, data, WithOnceKey(key))
		})
		byEvent := enqueueAll(t, se, run, func(_, _, typ string, data any) outbox.EventBuilder { return Event(typ, data) })
		if len(byBuilder) != 6 || len(byEvent) != len(byBuilder) {
			t.Fatalf("group commit %v: %d lines by Builder, %d by Event, want 6 each", group, len(byBuilder), len(byEvent))
		}
		for i := range byBuilder {
			if byBuilder[i].Seq != byEvent[i].Seq || !bytes.Equal(byBuilder[i].Line, byEvent[i].Line) {
				t.Errorf("group commit %v, line %d:\nBuilder: %d %s\nEvent:   %d %s", group, i,
					byBuilder[i].Seq, byBuilder[i].Line, byEvent[i].Seq, byEvent[i].Line)
			}
		}
	}
}

func TestAnEventIsRenderedForTheRunOfTheEnqueueItIsPassedTo(t *testing.T) {
	s, _ := outboxtest.Setup(t, outbox.WithLineCheck(CheckLine))
	ctx := outboxtest.Patient(t)
	for _, run := range []string{"a", "b", "a"} {
		if _, err := s.EnqueueEvent(ctx, run, Event("tick", run)); err != nil {
			t.Fatal(err)
		}
	}
	for run, want := range map[string]int64{"a": 2, "b": 1} {
		lines := outboxtest.AllLines(t, s, run)
		if int64(len(lines)) != want {
			t.Fatalf("run %q holds %d lines, want %d", run, len(lines), want)
		}
		for _, l := range lines {
			if err := CheckLine(run, l.Seq, l.Line); err != nil {
				t.Errorf("run %q seq %d: %v", run, l.Seq, err)
			}
		}
	}
}

func TestAnEventCalledOutsideAnEnqueueRendersNothingAndSaysWhy(t *testing.T) {
	line, err := Event("tick", 1)(1)
	if line != nil || err == nil {
		t.Fatalf("got %q, %v; want no line and an error", line, err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("run id")) {
		t.Errorf("the error does not say what is missing: %v", err)
	}
}

func TestAnEventWhoseDataCannotBeEncodedStoresNothing(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := outboxtest.Patient(t)
	if _, err := s.EnqueueEvent(ctx, "r", Event("bad", func() {})); err == nil {
		t.Fatal("an enqueue of data encoding/json refuses succeeded")
	}
	if used, err := s.EventsUsed(ctx, "r"); err != nil || used {
		t.Fatalf("EventsUsed = %v, %v after a failed enqueue; want false", used, err)
	}
	if _, err := s.EnqueueEvent(ctx, "r", Event("good", 1)); err != nil {
		t.Fatal(err)
	}
	if lines := outboxtest.AllLines(t, s, "r"); len(lines) != 1 || lines[0].Seq != 1 {
		t.Fatalf("after the failed enqueue the run holds %v, want seq 1", outboxtest.SeqsOf(lines))
	}
}

// A type no consumer could route (empty) or that encoding/json would rewrite (invalid UTF-8, where
// "a\xff" and "a\xfe" would both become "a\ufffd") is refused with nothing stored, instead of
// rendering a line whose type is not the one given.
func TestAnEventOfAnEmptyTypeOrOfATypeThatIsNotUTF8StoresNothing(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := outboxtest.Patient(t)
	for _, typ := range []string{"", "a\xff", "\xfe", "ok\xed\xa0\x80"} {
		if _, err := s.EnqueueEvent(ctx, "r", Event(typ, 1)); err == nil {
			t.Errorf("Event(%q) was stored", typ)
		}
		if _, err := s.EnqueueEvent(ctx, "r", Builder("r", typ, 1)); err == nil {
			t.Errorf("Builder(%q) was stored", typ)
		}
	}
	if used, err := s.EventsUsed(ctx, "r"); err != nil || used {
		t.Fatalf("EventsUsed = %v, %v after refused enqueues; want false", used, err)
	}
	// Control characters and a long type are valid JSON strings, kept as given.
	for _, typ := range []string{"\x01tab\t", strings.Repeat("x", 1<<20)} {
		if _, err := s.EnqueueEvent(ctx, "r", Event(typ, 1)); err != nil {
			t.Errorf("Event of a %d-byte type: %v", len(typ), err)
		}
	}
}
