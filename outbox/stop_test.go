// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// logBuffer is a slog destination safe for the relay's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// togglingSink refuses every batch while refuse is set, as a sink refuses a line it can never take,
// and keeps what it accepts.
type togglingSink struct {
	*outboxtest.MemSink
	mu     sync.Mutex
	refuse bool
}

var errWrongLine = errors.New("the line is not what the sink takes")

func (r *togglingSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	r.mu.Lock()
	refuse := r.refuse
	r.mu.Unlock()
	if refuse {
		return errors.Join(errWrongLine, outbox.ErrSinkRefused)
	}
	return r.MemSink.Append(ctx, runID, lines)
}

func (r *togglingSink) set(refuse bool) { r.mu.Lock(); r.refuse = refuse; r.mu.Unlock() }

func runStats(t *testing.T, s *outbox.Store, run string) outbox.RunStats {
	t.Helper()
	for st, err := range s.AllRuns(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if st.RunID == run {
			return st
		}
	}
	t.Fatalf("run %q is not listed", run)
	return outbox.RunStats{}
}

func TestARelayThatStopsOnARefusalLogsItAtErrorLevelAndRecordsWhereAndWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs logBuffer
	s, _ := outboxtest.Setup(t, outbox.WithLogger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))))
	j, err := journal.OpenFile(filepath.Join(t.TempDir(), "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, b := range []outbox.EventBuilder{journal.Builder("r", "a", nil), wrongSeq("r"), journal.Builder("r", "c", nil)} {
		if _, err := s.EnqueueEvent(ctx, "r", b); err != nil {
			t.Fatal(err)
		}
	}
	err = outboxtest.NewRelay(t, s, j, "r").Run(ctx)
	if !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Run: %v; want ErrSinkRefused", err)
	}
	if out := logs.String(); !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, `"run":"r"`) {
		t.Errorf("logged %q; want the stop at Error level, naming the run", out)
	}
	st := runStats(t, s, "r")
	if st.StoppedSeq != 1 || !strings.Contains(st.StoppedReason, "seq 2") || st.StoppedAt.IsZero() {
		t.Errorf("stats: stopped at %d (%v), %q; want seq 1, a reason naming seq 2", st.StoppedSeq, st.StoppedAt, st.StoppedReason)
	}
	if st.Pending != 3 {
		t.Errorf("%d lines pending, want 3 (all kept)", st.Pending)
	}
}

func TestARunsStopIsKeptAcrossRestartsUntilTheRunProjectsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	sink := &togglingSink{MemSink: outboxtest.NewMemSink(), refuse: true}
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("a")); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, sink, "r").Flush(ctx); !errors.Is(err, errWrongLine) {
		t.Fatalf("Flush: %v", err)
	}
	s = outboxtest.Reopen(t, s)
	if st := runStats(t, s, "r"); st.StoppedSeq != 1 || !strings.Contains(st.StoppedReason, errWrongLine.Error()) {
		t.Fatalf("after a restart: stopped at %d, %q", st.StoppedSeq, st.StoppedReason)
	}
	// Recover meets the refusal again, and records it again.
	if err := outboxtest.NewRelay(t, s, sink, "next").Recover(ctx); !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Recover: %v", err)
	}
	if st := runStats(t, s, "r"); st.StoppedSeq != 1 {
		t.Fatalf("after Recover: stopped at %d", st.StoppedSeq)
	}
	sink.set(false)
	if err := outboxtest.NewRelay(t, s, sink, "next").Recover(ctx); err != nil {
		t.Fatalf("Recover once the sink takes the line: %v", err)
	}
	if got := len(sink.All()); got != 1 {
		t.Fatalf("the sink has %d lines, want 1", got)
	}
	for st, err := range s.AllRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if st.StoppedSeq != 0 {
			t.Errorf("run %q still stopped at %d after it projected", st.RunID, st.StoppedSeq)
		}
	}
}

func TestRecoverProjectsEveryRunItCanAndNamesEachRunItCouldNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	jpath := filepath.Join(t.TempDir(), "journal.jsonl")
	good := []string{"a", "c", "e"}
	bad := []string{"b", "d"}
	for _, run := range good {
		for range 3 {
			if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", nil)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, run := range bad {
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueEvent(ctx, run, wrongSeq(run)); err != nil {
			t.Fatal(err)
		}
	}
	s = outboxtest.Reopen(t, s)
	j, err := journal.OpenFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	relay := outboxtest.NewRelay(t, s, j, "live")
	err = relay.Recover(ctx)
	if !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Recover: %v; want the refusals", err)
	}
	for _, run := range bad {
		if !strings.Contains(err.Error(), `run "`+run+`"`) {
			t.Errorf("Recover's error does not name run %q: %v", run, err)
		}
		if st := runStats(t, s, run); st.Lines != 2 || st.Projected != 0 || st.StoppedSeq != 1 {
			t.Errorf("run %q: %+v; want its 2 lines kept, unprojected, stopped at 1", run, st)
		}
	}
	for _, run := range good {
		if strings.Contains(err.Error(), `run "`+run+`"`) {
			t.Errorf("Recover's error names run %q, which it projected: %v", run, err)
		}
		last, err := j.LastSeq(run)
		if err != nil || last != 3 {
			t.Errorf("run %q ends at %d in the journal, %v; want 3", run, last, err)
		}
		if p, err := s.Projected(ctx, run); err != nil || p != 3 {
			t.Errorf("run %q projected to %d, %v", run, p, err)
		}
	}
	runs, err := collect(s.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(bad) {
		t.Errorf("%d runs keep rows, want only the %d stuck ones: %+v", len(runs), len(bad), runs)
	}
	// The engine starts beside the stuck runs.
	if _, err := s.EnqueueEvent(ctx, "live", journal.Handshake("live", nil)); err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatalf("the live run's Flush: %v", err)
	}
}

func TestRecoverStopsAtOnceWhenTheSinkItselfKeepsFailing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for _, run := range []string{"a", "b", "c"} {
		if _, err := s.EnqueueEvent(ctx, run, outboxtest.LineOf("x")); err != nil {
			t.Fatal(err)
		}
	}
	s = outboxtest.Reopen(t, s)
	sink := outboxtest.NewMemSink()
	sink.SetFailing(true)
	err := outboxtest.FastRelay(t, s, sink, "live", outbox.WithFlushAttempts(2)).Recover(ctx)
	if !errors.Is(err, outboxtest.ErrSinkDown) || !strings.Contains(err.Error(), `run "a"`) {
		t.Fatalf("Recover: %v; want the sink's error, naming the run", err)
	}
	if tried := sink.Tried(); len(tried) != 2 {
		t.Errorf("the sink was offered %d batches, want 2: the attempts at the first run, none at the others", len(tried))
	}
	for _, run := range []string{"a", "b", "c"} {
		if st := runStats(t, s, run); st.Lines != 1 || st.StoppedSeq != 0 {
			t.Errorf("run %q: %+v; want its line kept and no stop recorded (the sink failed, it did not refuse)", run, st)
		}
	}
}
