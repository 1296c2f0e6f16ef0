// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

var errCheck = errors.New("the check refuses it")

// wrongSeq renders a journal line keyed one seq too far, the hand-written builder's natural mistake.
func wrongSeq(run string) outbox.EventBuilder {
	return func(seq int64) ([]byte, error) {
		return journal.Builder(run, "spend", nil)(seq + 1)
	}
}

// checkedEnqueues runs one enqueue of build through each enqueue method.
var checkedEnqueues = map[string]func(ctx context.Context, s *outbox.Store, run string, build outbox.EventBuilder) (int64, error){
	"EnqueueEvent": func(ctx context.Context, s *outbox.Store, run string, b outbox.EventBuilder) (int64, error) {
		return s.EnqueueEvent(ctx, run, b)
	},
	"EnqueueOnce": func(ctx context.Context, s *outbox.Store, run string, b outbox.EventBuilder) (int64, error) {
		_, seq, err := s.EnqueueOnce(ctx, run, fmt.Sprintf("key-%p", &b), b)
		return seq, err
	},
	"EnqueueEvents": func(ctx context.Context, s *outbox.Store, run string, b outbox.EventBuilder) (int64, error) {
		seqs, err := s.EnqueueEvents(ctx, run, []outbox.EventBuilder{b})
		if err != nil {
			return 0, err
		}
		return seqs[0], nil
	},
	"EnqueueTx": func(ctx context.Context, s *outbox.Store, run string, b outbox.EventBuilder) (seq int64, err error) {
		err = s.WriteTx(ctx, func(tx *sql.Tx) (err error) {
			seq, err = s.EnqueueTx(ctx, tx, run, b)
			return err
		})
		return seq, err
	},
	"EnqueueOnceTx": func(ctx context.Context, s *outbox.Store, run string, b outbox.EventBuilder) (seq int64, err error) {
		err = s.WriteTx(ctx, func(tx *sql.Tx) (err error) {
			_, seq, err = s.EnqueueOnceTx(ctx, tx, run, fmt.Sprintf("key-%p", &b), b)
			return err
		})
		return seq, err
	},
}

func TestALineTheCheckRefusesFailsItsEnqueueAloneStoresNothingAndConsumesNoSeq(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		for name, enqueue := range checkedEnqueues {
			t.Run(fmt.Sprintf("%s/group=%v", name, group), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, _ := outboxtest.Setup(t, outbox.WithLineCheck(journal.CheckLine), outbox.WithGroupCommit(group))
				if seq, err := enqueue(ctx, s, "r", journal.Builder("r", "a", nil)); err != nil || seq != 1 {
					t.Fatalf("good line: seq %d, %v", seq, err)
				}
				seq, err := enqueue(ctx, s, "r", wrongSeq("r"))
				if !errors.Is(err, outbox.ErrInvalidLine) || seq != 0 {
					t.Fatalf("wrong seq: seq %d, %v; want ErrInvalidLine", seq, err)
				}
				if _, err := enqueue(ctx, s, "r", journal.Builder("other-run", "a", nil)); !errors.Is(err, outbox.ErrInvalidLine) {
					t.Fatalf("wrong run: %v; want ErrInvalidLine", err)
				}
				if seq, err := enqueue(ctx, s, "r", journal.Builder("r", "b", nil)); err != nil || seq != 2 {
					t.Fatalf("next good line: seq %d, %v; want 2", seq, err)
				}
				lines, err := s.PendingEvents(ctx, "r", 0, 10)
				if err != nil || len(lines) != 2 {
					t.Fatalf("stored %d lines, %v; want 2", len(lines), err)
				}
				for _, l := range lines {
					if err := journal.CheckLine("r", l.Seq, l.Line); err != nil {
						t.Errorf("stored line %d: %v", l.Seq, err)
					}
				}
			})
		}
	}
}

func TestTheLineCheckErrorWrapsErrInvalidLineAndTheChecksOwn(t *testing.T) {
	t.Parallel()
	var got struct {
		run  string
		seq  int64
		line string
	}
	s, _ := outboxtest.Setup(t, outbox.WithLineCheck(func(run string, seq int64, line []byte) error {
		got.run, got.seq, got.line = run, seq, string(line)
		return errCheck
	}))
	_, err := s.EnqueueEvent(context.Background(), "r", outboxtest.ConstLine([]byte(`{"x":1}`)))
	if !errors.Is(err, outbox.ErrInvalidLine) || !errors.Is(err, errCheck) {
		t.Fatalf("err %v; want both ErrInvalidLine and the check's error", err)
	}
	if got.run != "r" || got.seq != 1 || got.line != `{"x":1}` {
		t.Errorf("the check was given %+v", got)
	}
	if used, err := s.EventsUsed(context.Background(), "r"); err != nil || used {
		t.Errorf("EventsUsed after a refused line: %v, %v; want false", used, err)
	}
}

func TestALineCheckThatPanicsPanicsTheCallerAndLeavesTheStoreUsable(t *testing.T) {
	t.Parallel()
	panicking := true
	s, _ := outboxtest.Setup(t, outbox.WithLineCheck(func(string, int64, []byte) error {
		if panicking {
			panic("check")
		}
		return nil
	}))
	func() {
		defer func() {
			if v := recover(); v != "check" {
				t.Errorf("recovered %v; want the check's own value", v)
			}
		}()
		s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("a"))
	}()
	panicking = false
	if seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("a")); err != nil || seq != 1 {
		t.Fatalf("after the panic: seq %d, %v; want 1", seq, err)
	}
}

func TestInAGroupOnlyTheCallWhoseLineTheCheckRefusesFails(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t, outbox.WithLineCheck(journal.CheckLine))
	ctx := context.Background()
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := journal.Builder("r", "ok", nil)
			if i%4 == 0 {
				b = wrongSeq("r")
			}
			_, errs[i] = s.EnqueueEvent(ctx, "r", b)
		}()
	}
	wg.Wait()
	good := 0
	for i, err := range errs {
		switch {
		case i%4 == 0 && !errors.Is(err, outbox.ErrInvalidLine):
			t.Errorf("call %d: %v; want ErrInvalidLine", i, err)
		case i%4 != 0 && err != nil:
			t.Errorf("call %d: %v", i, err)
		case err == nil:
			good++
		}
	}
	lines, err := s.PendingEvents(ctx, "r", 0, n)
	if err != nil || len(lines) != good {
		t.Fatalf("stored %d lines, %v; want %d", len(lines), err, good)
	}
	for i, l := range lines {
		if l.Seq != int64(i+1) {
			t.Fatalf("line %d has seq %d: numbers are not dense", i, l.Seq)
		}
		if err := journal.CheckLine("r", l.Seq, l.Line); err != nil {
			t.Errorf("stored line %d: %v", l.Seq, err)
		}
	}
}

func TestANilLineCheckFailsOpen(t *testing.T) {
	t.Parallel()
	if _, err := outbox.Open(context.Background(), t.TempDir()+"/book.db", outbox.WithLineCheck(nil)); err == nil {
		t.Fatal("Open with a nil line check succeeded")
	}
}

func TestEnqueueOnceTxAnnouncesOnceInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	errRollback := errors.New("roll back")
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if ok, seq, err := s.EnqueueOnceTx(ctx, tx, "r", "unit:1", outboxtest.LineOf("done")); !ok || seq != 1 || err != nil {
			t.Errorf("first: %v %d %v", ok, seq, err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	// Rolled back: the key is free and the seq unused.
	for i, want := range []bool{true, false} {
		var ok bool
		var seq int64
		err := s.WriteTx(ctx, func(tx *sql.Tx) (err error) {
			ok, seq, err = s.EnqueueOnceTx(ctx, tx, "r", "unit:1", outboxtest.LineOf("done"))
			return err
		})
		if err != nil || ok != want || (want && seq != 1) || (!want && seq != 0) {
			t.Errorf("attempt %d: %v %d %v; want announcing %v", i, ok, seq, err, want)
		}
	}
	if ok, _, err := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done")); ok || err != nil {
		t.Errorf("EnqueueOnce of the key EnqueueOnceTx holds: %v, %v", ok, err)
	}
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, _, err := s.EnqueueOnceTx(ctx, tx, "r", "", outboxtest.LineOf("x"))
		return err
	})
	if !errors.Is(err, outbox.ErrInvalidOnceKey) {
		t.Errorf("empty key: %v", err)
	}
}
