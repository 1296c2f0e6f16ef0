// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// checkUsable makes one call of every kind on s and fails the test if any of them fails: a store that a
// caller's misfortune took down would fail them all.
func checkUsable(t *testing.T, s *outbox.Store, runID string) {
	t.Helper()
	ctx := outboxtest.Patient(t) // a check, not the calls under test: no short operation timeout
	seq, err := s.EnqueueEvent(ctx, runID, outboxtest.LineOf("after"))
	if err != nil {
		t.Fatalf("EnqueueEvent after: %v", err)
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := s.EnqueueTx(ctx, tx, runID, outboxtest.LineOf("tx")); return err }); err != nil {
		t.Fatalf("WriteTx after: %v", err)
	}
	key := fmt.Sprintf("usable:%s:%d", runID, seq)
	if _, err := s.EnqueueEvents(ctx, runID, []outbox.EventBuilder{outboxtest.LineOf("a"), outboxtest.LineOf("b")}); err != nil {
		t.Fatalf("EnqueueEvents after: %v", err)
	}
	if err := s.MarkAnnounced(ctx, runID, map[int64]string{seq: key}); err != nil {
		t.Fatalf("MarkAnnounced after: %v", err)
	}
	if _, err := s.PendingEvents(ctx, runID, 0, 10); err != nil {
		t.Fatalf("PendingEvents after: %v", err)
	}
	// Every row is stored, a projected ledger row with its digest in place of its line.
	runs, err := collect(s.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range runs {
		if st.RunID == runID && (st.Lines == 0 || st.Lines != st.LastSeq) {
			t.Fatalf("seqs of %s not dense: %d rows, last %d", runID, st.Lines, st.LastSeq)
		}
	}
}

func TestACancelledWriteTxCostsThatCallAlone(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		fn   func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error
	}{
		{"cancelled inside fn, fn returns nil", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
				if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("lost")); err != nil {
					return err
				}
				cancel()
				return nil
			}},
		{"cancelled inside fn, fn returns its error", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
				cancel()
				_, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("lost"))
				return err
			}},
		{"deadline passes while fn sleeps", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
			if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("lost")); err != nil {
				return err
			}
			<-ctx.Done()
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			return err
		}},
		{"cancelled inside a builder", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(ctx context.Context, cancel context.CancelFunc, tx *sql.Tx) error {
				_, err := s.EnqueueTx(ctx, tx, "r", func(seq int64) ([]byte, error) {
					cancel()
					return fmt.Appendf(nil, `{"seq":%d}`, seq), nil
				})
				return err
			}},
	} {
		ctx, cancel := tc.ctx()
		err := s.WriteTx(ctx, func(tx *sql.Tx) error { return tc.fn(ctx, cancel, tx) })
		cancel()
		if err == nil {
			t.Errorf("%s: WriteTx returned nil", tc.name)
		}
	}
	// Nothing of the cancelled calls is stored, and every later call works, densely numbered.
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); len(got) != 1 {
		t.Errorf("stored after cancelled calls: %v, want [1]", got)
	}
	checkUsable(t, s, "r")
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); got[1] != 2 {
		t.Errorf("the next seq after cancelled calls is %d, want 2", got[1])
	}
}

func TestAWriteTxPastTheOperationTimeoutCostsThatCallAlone(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t, outbox.WithOpTimeout(time.Second))
	err := s.WriteTx(context.Background(), func(tx *sql.Tx) error {
		if _, err := s.EnqueueTx(context.Background(), tx, "r", outboxtest.LineOf("lost")); err != nil {
			return err
		}
		time.Sleep(1500 * time.Millisecond)
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WriteTx past the operation timeout: %v, want DeadlineExceeded", err)
	}
	checkUsable(t, s, "r")
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))[0]; got != 1 {
		t.Errorf("first stored seq %d, want 1", got)
	}
}

func TestAnEnqueueTxAfterAnInterruptedStatementStoresNothing(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (id INTEGER PRIMARY KEY, cents INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		// A long write interrupted mid-way: SQLite rolls the whole transaction back.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, ierr := tx.ExecContext(short, `INSERT INTO spend (cents)
			WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) SELECT i FROM n`)
		if ierr == nil {
			t.Skip("the statement finished before its deadline")
		}
		// A careless caller ignores that error and goes on: its own statement would commit on its
		// own, and the store refuses that commit.
		tx.ExecContext(ctx, `INSERT INTO spend (cents) VALUES (7)`)
		_, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("x"))
		if err == nil {
			t.Error("EnqueueTx in a transaction SQLite rolled back returned nil")
		}
		return nil
	})
	if err == nil {
		t.Error("WriteTx of a transaction SQLite rolled back returned nil")
	}
	checkNothingStored(t, s, "r")
	checkUsable(t, s, "r")
}

// checkNothingStored fails the test when a WriteTx that returned an error left a line of run or a row
// of the caller's spend table.
func checkNothingStored(t *testing.T, s *outbox.Store, run string) {
	t.Helper()
	if n := len(outboxtest.AllLines(t, s, run)); n != 0 {
		t.Errorf("%d lines stored by a WriteTx that returned an error", n)
	}
	if n := spendRows(t, s); n != 0 {
		t.Errorf("%d of the caller's rows stored by a WriteTx that returned an error", n)
	}
}

func spendRows(t *testing.T, s *outbox.Store) int {
	t.Helper()
	var n int
	if err := s.WriteTx(context.Background(), func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FROM spend`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAWriteTxFunctionThatCommitsItselfStoresNothing: the transaction is the store's to commit; a
// function that commits it itself gets an error from WriteTx, and nothing of it is stored, so a
// retry cannot enqueue the event twice.
func TestAWriteTxFunctionThatCommitsItselfStoresNothing(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE spend (id INTEGER PRIMARY KEY, cents INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO spend (cents) VALUES (1)`); err != nil {
			return err
		}
		if _, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("x")); err != nil {
			return err
		}
		tx.Commit()
		return nil
	})
	if err == nil {
		t.Error("WriteTx whose function committed the transaction itself returned nil")
	}
	checkNothingStored(t, s, "r")
	checkUsable(t, s, "r")
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))[0]; got != 1 {
		t.Errorf("first seq %d, want 1", got)
	}
}

// TestAWaitForTheWriterEndsWithTheCallersContext: while a WriteTx holds the one writer connection,
// every write method called with a short deadline, or with none under WithOpTimeout, returns its
// context's error instead of waiting for the writer, with group commit on and off; a call made
// inside the WriteTx function itself (the documented misuse) does the same instead of wedging the
// store; and the store goes on once the WriteTx ends.
func TestAWaitForTheWriterEndsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group), outbox.WithOpTimeout(2*time.Second))
		ctx := context.Background()
		outboxtest.MustEnqueue(t, s, "r")
		release := make(chan struct{})
		holding := make(chan struct{})
		held := make(chan error, 1)
		// A deadline of its own, so the operation timeout does not end the holder first.
		long, cancelLong := context.WithTimeout(ctx, time.Minute)
		defer cancelLong()
		go func() {
			held <- s.WriteTx(long, func(tx *sql.Tx) error {
				close(holding)
				<-release
				return nil
			})
		}()
		<-holding
		calls := map[string]func(context.Context) error{
			"EnqueueEvent": func(c context.Context) error { _, err := s.EnqueueEvent(c, "r", outboxtest.LineOf("x")); return err },
			"EnqueueOnce": func(c context.Context) error {
				_, _, err := s.EnqueueOnce(c, "r", "k", outboxtest.LineOf("x"))
				return err
			},
			"EnqueueEvents": func(c context.Context) error {
				_, err := s.EnqueueEvents(c, "r", []outbox.EventBuilder{outboxtest.LineOf("x")})
				return err
			},
			"MarkAnnounced": func(c context.Context) error { return s.MarkAnnounced(c, "r", map[int64]string{1: "k1"}) },
			"WriteTx":       func(c context.Context) error { return s.WriteTx(c, func(*sql.Tx) error { return nil }) },
			"ForgetEvents":  func(c context.Context) error { _, err := s.ForgetEvents(c, "r"); return err },
		}
		for name, call := range calls {
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			done := make(chan error, 1)
			go func() { done <- call(short) }()
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("group %v: %s behind a held writer: %v, want DeadlineExceeded", group, name, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("group %v: %s waited for the writer past its deadline", group, name)
			}
			cancel()
		}
		// No deadline of its own: the operation timeout ends the wait.
		if err := calls["EnqueueEvent"](ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("group %v: EnqueueEvent with no deadline behind a held writer: %v, want the operation timeout", group, err)
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		// The misuse: a write method called from inside a WriteTx function fails at once, saying so.
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			_, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("inner"))
			return err
		})
		if !errors.Is(err, outbox.ErrCallInsideTx) {
			t.Errorf("group %v: EnqueueEvent inside a WriteTx function: %v, want ErrCallInsideTx", group, err)
		}
		checkUsable(t, s, "r")
		if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); got[1] != 2 {
			t.Errorf("group %v: seqs after the waits: %v", group, got)
		}
	}
}
