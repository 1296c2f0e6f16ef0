// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// listingSink is a sink that says it holds runs it was never given.
type listingSink struct {
	*outboxtest.MemSink
	runs  []outbox.SinkRun
	asked int
}

func (l *listingSink) SinkRuns(context.Context) ([]outbox.SinkRun, error) {
	l.asked++
	return l.runs, nil
}

func TestAnErrBookBehindNamesTheFirstFiveRunsAndCountsTheRest(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, _ := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "known")
	outboxtest.MustEnqueue(t, s, "known")
	sink := &listingSink{MemSink: outboxtest.NewMemSink(), runs: []outbox.SinkRun{{RunID: "known", LastSeq: 2}}}
	for i := range 8 {
		sink.runs = append(sink.runs, outbox.SinkRun{RunID: fmt.Sprintf("lost-%d", i), LastSeq: int64(i + 1)})
	}
	sink.runs = append(sink.runs, outbox.SinkRun{RunID: "known", LastSeq: 3})
	relay := outboxtest.FastRelay(t, s, sink, "known")
	err := relay.Flush(ctx)
	msg := fmt.Sprint(err)
	if !errors.Is(err, outbox.ErrBookBehind) || !strings.Contains(msg, "9 runs") || !strings.Contains(msg, "and 4 more") ||
		!strings.Contains(msg, `run "lost-0": the sink holds seqs 1..1, the book never recorded the run`) ||
		strings.Contains(msg, "lost-5") {
		t.Fatalf("Flush: %v", err)
	}
	if len(sink.All()) != 0 {
		t.Fatalf("the sink was given %d lines", len(sink.All()))
	}
	// A stopped relay does not ask again: nothing it does can cure the book.
	if err := relay.Run(ctx); !errors.Is(err, outbox.ErrBookBehind) || sink.asked != 1 {
		t.Fatalf("Run: %v after %d listings", err, sink.asked)
	}
	// The run the book knows further than the sink, and the one it knows as far, pass.
	sink.runs = []outbox.SinkRun{{RunID: "known", LastSeq: 1}}
	if err := outboxtest.FastRelay(t, s, sink, "known").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Off, the relay appends whatever the sink holds.
	sink.runs = []outbox.SinkRun{{RunID: "lost-0", LastSeq: 9}}
	outboxtest.MustEnqueue(t, s, "known")
	if err := outboxtest.FastRelay(t, s, sink, "known", outbox.WithBookCheck(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sink.All()) != 3 {
		t.Fatalf("the sink holds %d lines, want 3", len(sink.All()))
	}
}
