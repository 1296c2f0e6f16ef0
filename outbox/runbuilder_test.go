// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// keyed renders "run/seq", recording what it was given.
func keyed(got *[]string) outbox.EventBuilder {
	return outbox.RunBuilder(func(runID string, seq int64) ([]byte, error) {
		*got = append(*got, fmt.Sprintf("%s/%d", runID, seq))
		return fmt.Appendf(nil, "%s/%d", runID, seq), nil
	})
}

func TestARunBuilderIsGivenTheRunAndSeqOfEveryEnqueueItIsPassedTo(t *testing.T) {
	for _, group := range []bool{true, false} {
		s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
		ctx := outboxtest.Patient(t)
		var got []string
		if _, err := s.EnqueueEvent(ctx, "a", keyed(&got)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.EnqueueOnce(ctx, "b", "k1", keyed(&got)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueEvents(ctx, "a", []outbox.EventBuilder{keyed(&got), keyed(&got)}); err != nil {
			t.Fatal(err)
		}
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := s.EnqueueTx(ctx, tx, "b", keyed(&got)); err != nil {
				return err
			}
			_, _, err := s.EnqueueOnceTx(ctx, tx, "c", "k2", keyed(&got))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a/1", "b/1", "a/2", "a/3", "b/2", "c/1"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("group commit %v: the builders were given %v, want %v", group, got, want)
		}
		for _, run := range []string{"a", "b", "c"} {
			for _, l := range outboxtest.AllLines(t, s, run) {
				if string(l.Line) != fmt.Sprintf("%s/%d", run, l.Seq) {
					t.Errorf("run %s seq %d holds %q", run, l.Seq, l.Line)
				}
			}
		}
	}
}

func TestARunBuilderThatDeclinesFailsOrPanicsStoresNothing(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := outboxtest.Patient(t)
	decline := outbox.RunBuilder(func(string, int64) ([]byte, error) { return nil, nil })
	if seq, err := s.EnqueueEvent(ctx, "r", decline); seq != 0 || err != nil {
		t.Fatalf("a declining builder: seq %d, %v; want 0, nil", seq, err)
	}
	errMine := errors.New("mine")
	fail := outbox.RunBuilder(func(string, int64) ([]byte, error) { return nil, errMine })
	if _, err := s.EnqueueEvent(ctx, "r", fail); !errors.Is(err, errMine) {
		t.Fatalf("a failing builder: %v, want its error", err)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Fatalf("recovered %v, want the builder's own panic", v)
			}
		}()
		s.EnqueueEvent(ctx, "r", outbox.RunBuilder(func(string, int64) ([]byte, error) { panic("boom") }))
	}()
	if used, err := s.EventsUsed(ctx, "r"); err != nil || used {
		t.Fatalf("EventsUsed = %v, %v; want nothing stored", used, err)
	}
	if _, err := s.EnqueueEvent(ctx, "r", outbox.RunBuilder(nil)); err == nil {
		t.Fatal("a RunBuilder of nil was taken")
	}
}

func TestARunBuilderCalledByAnotherBuilderFailsItsEnqueueInsteadOfRenderingWithoutItsRun(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := outboxtest.Patient(t)
	var got []string
	inner := keyed(&got)
	wrapper := func(seq int64) ([]byte, error) {
		l, err := inner(seq)
		if err != nil {
			return nil, fmt.Errorf("wrapped: %w", err)
		}
		return l, nil
	}
	if _, err := s.EnqueueEvent(ctx, "r", wrapper); err == nil {
		t.Fatal("the enqueue succeeded")
	}
	if len(got) != 0 {
		t.Fatalf("the inner builder rendered %v", got)
	}
	if used, err := s.EventsUsed(ctx, "r"); err != nil || used {
		t.Fatalf("EventsUsed = %v, %v; want nothing stored", used, err)
	}
}
