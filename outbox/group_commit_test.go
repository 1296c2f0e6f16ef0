// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestGroupedCallsStayIsolated runs many concurrent enqueues, some of whose builders fail, panic or
// decline, and checks that each outcome reaches its own caller only and that the stored seqs are
// dense.
func TestGroupedCallsStayIsolated(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	const n = 400
	var wg sync.WaitGroup
	type outcome struct {
		kind     int
		seq      int64
		err      error
		panicked any
	}
	out := make([]outcome, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := i % 5
			defer func() { out[i].panicked = recover() }()
			out[i].kind = kind
			seq, err := s.EnqueueEvent(context.Background(), "r", func(seq int64) ([]byte, error) {
				switch kind {
				case 1:
					return nil, fmt.Errorf("call %d: %w", i, outboxtest.ErrRender)
				case 2:
					panic(fmt.Sprintf("call %d", i))
				case 3:
					return nil, nil
				}
				return fmt.Appendf(nil, `{"call":%d,"seq":%d}`, i, seq), nil
			})
			out[i].seq, out[i].err = seq, err
		}()
	}
	wg.Wait()
	var seqs []int64
	for i, o := range out {
		switch o.kind {
		case 1:
			if !errors.Is(o.err, outboxtest.ErrRender) || o.seq != 0 || !strings.Contains(o.err.Error(), fmt.Sprintf("call %d:", i)) {
				t.Errorf("call %d: (%d, %v), want its own builder error", i, o.seq, o.err)
			}
		case 2:
			if o.panicked != fmt.Sprintf("call %d", i) {
				t.Errorf("call %d: recovered %v, want its own panic", i, o.panicked)
			}
		case 3:
			if o.err != nil || o.seq != 0 {
				t.Errorf("call %d (declining): (%d, %v)", i, o.seq, o.err)
			}
		default:
			if o.err != nil || o.seq == 0 || o.panicked != nil {
				t.Errorf("call %d: (%d, %v, %v)", i, o.seq, o.err, o.panicked)
			}
			seqs = append(seqs, o.seq)
		}
	}
	stored := outboxtest.AllLines(t, s, "r")
	if diff := cmp.Diff(outboxtest.SeqRange(1, int64(len(seqs))), outboxtest.SeqsOf(stored)); diff != "" {
		t.Errorf("stored seqs are not dense (-want +got):\n%s", diff)
	}
	// Each stored line is the one its caller rendered for the seq it was told.
	for _, l := range stored {
		var call int
		var seq int64
		fmt.Sscanf(string(l.Line), `{"call":%d,"seq":%d}`, &call, &seq)
		if seq != l.Seq || out[call].seq != l.Seq {
			t.Errorf("line %s stored at seq %d, its caller was told %d", l.Line, l.Seq, out[call].seq)
		}
	}
}

func TestEnqueueEventsIsOneTransactionAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	seqs, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{outboxtest.LineOf("a"), outboxtest.ConstLine(nil), outboxtest.LineOf("b"), outboxtest.LineOf("c")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{2, 0, 3, 4}, seqs); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
	seqs, err = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{outboxtest.LineOf("d"), func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }, outboxtest.LineOf("e")})
	if !errors.Is(err, outboxtest.ErrRender) || seqs != nil {
		t.Errorf("failing batch: (%v, %v)", seqs, err)
	}
	_, err = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{outboxtest.LineOf("d"), outboxtest.ConstLine([]byte("bad\nline"))})
	if !errors.Is(err, outbox.ErrInvalidLine) {
		t.Errorf("invalid line: %v", err)
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 4 {
		t.Errorf("rows = %d, want 4: a failed batch stores nothing", n)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 5 {
		t.Errorf("next seq = %d, want 5: a failed batch consumes no number", got)
	}
	if seqs, err := s.EnqueueEvents(ctx, "r", nil); err != nil || len(seqs) != 0 {
		t.Errorf("empty batch: (%v, %v)", seqs, err)
	}
	if _, err := s.EnqueueEvents(ctx, "", []outbox.EventBuilder{outboxtest.LineOf("x")}); !errors.Is(err, outbox.ErrInvalidRunID) {
		t.Errorf("empty run id: %v", err)
	}
	if _, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{nil}); err == nil {
		t.Error("nil builder accepted")
	}
}

func TestGroupCommitCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(false))
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				outboxtest.MustEnqueue(t, s, "r")
			}
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(outboxtest.SeqRange(1, 40), outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
}

// TestAGroupWithOneRefusedLargeLineCommitsTheOthersAndLeavesNoLineBehind: several callers of large
// lines share groups, and a trigger refuses every row of one run. Those calls alone fail, the others
// are stored, and events_lines holds exactly the stored events' lines.
func TestAGroupWithOneRefusedLargeLineCommitsTheOthersAndLeavesNoLineBehind(t *testing.T) {
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse_bad BEFORE INSERT ON events_outbox
			WHEN NEW.engine_run_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		run := "r"
		if w%4 == 0 {
			run = "bad"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				seq, err := s.EnqueueEvent(ctx, run, func(seq int64) ([]byte, error) {
					return []byte(strings.Repeat("x", 600+int(seq))), nil
				})
				if run == "bad" && (err == nil || seq != 0) {
					t.Errorf("a refused call returned seq %d, %v", seq, err)
				}
				if run == "r" && err != nil {
					t.Errorf("a call grouped with refused ones failed: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	lines := outboxtest.AllLines(t, s, "r")
	if len(lines) != 60 {
		t.Fatalf("%d lines stored, want 60", len(lines))
	}
	for i, l := range lines {
		if l.Seq != int64(i+1) || len(l.Line) != 600+int(l.Seq) {
			t.Errorf("line %d: seq %d with %d bytes", i+1, l.Seq, len(l.Line))
		}
	}
	if n := len(outboxtest.AllLines(t, s, "bad")); n != 0 {
		t.Errorf("run bad holds %d lines", n)
	}
	var spilled int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled); err != nil {
		t.Fatal(err)
	}
	if spilled != 60 {
		t.Errorf("events_lines holds %d lines for 60 stored events", spilled)
	}
}
