// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
)

func TestAHandlerErrorStopsTheCallWithNothingCommittedAndTheSameCallGivesTheSameOutcome(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 2))
	boom := errors.New("boom")
	failing := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := insertHandler(ctx, tx, ev); err != nil {
			return err
		}
		if ev.RunID == "r" && ev.Seq == 4 {
			return boom
		}
		return nil
	}
	call := [][]byte{line("s", 1), line("r", 3), line("q", 2), line("r", 4), line("r", 5)}
	for i := range 2 {
		rep, err := in.Apply(context.Background(), call, failing)
		if !errors.Is(err, boom) {
			t.Fatalf("call %d: %v, want the handler's error", i, err)
		}
		if msg := err.Error(); !strings.Contains(msg, `run "r" seq 4`) {
			t.Errorf("call %d: %q does not name the run and seq", i, msg)
		}
		if rep != (inbox.Report{}) {
			t.Errorf("call %d: report %+v beside an error", i, rep)
		}
		// Nothing of the call: neither the lines before the failing one, nor the gap's quarantine.
		d := rawDB(t, path)
		if n := count(t, d, `SELECT count(*) FROM applied`); n != 2 {
			t.Errorf("call %d: %d rows, want the 2 of before", i, n)
		}
		if p := position(t, in, "r"); p != 2 {
			t.Errorf("call %d: position %d", i, p)
		}
		if p := position(t, in, "s"); p != 0 {
			t.Errorf("call %d: run s at %d", i, p)
		}
		if qs := quarantined(t, in); len(qs) != 0 {
			t.Errorf("call %d: quarantined %v", i, qs)
		}
	}
}

func TestAHandlerReturningErrQuarantineParksItsRunUndoesItsWritesAndTheCallGoesOn(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	refuse := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := insertHandler(ctx, tx, ev); err != nil {
			return err
		}
		if ev.RunID == "r" && ev.Seq == 2 {
			return fmt.Errorf("cannot book it: %w", inbox.ErrQuarantine)
		}
		return nil
	}
	rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("r", 2), line("s", 1), line("r", 3), line("s", 2)}, refuse)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 3, Quarantined: 2}, rep); diff != "" {
		t.Error(diff)
	}
	d := rawDB(t, path)
	if n := count(t, d, `SELECT count(*) FROM applied WHERE run = 'r'`); n != 1 {
		t.Errorf("run r: %d rows, want seq 1's only (seq 2's write undone)", n)
	}
	if n := count(t, d, `SELECT count(*) FROM applied WHERE run = 's'`); n != 2 {
		t.Errorf("run s: %d rows", n)
	}
	if p := position(t, in, "r"); p != 1 {
		t.Errorf("position %d, want 1", p)
	}
	want := []inbox.Quarantine{{RunID: "r", Reason: "handler", Expected: 2, Got: 2, Detail: "cannot book it: " + inbox.ErrQuarantine.Error()}}
	if diff := cmp.Diff(want, quarantined(t, in), ignoreSince); diff != "" {
		t.Error(diff)
	}
}

type panicValue struct{ n int }

func TestAHandlerPanicRollsBackAndRepanicsWithTheHandlersValue(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	panicking := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := insertHandler(ctx, tx, ev); err != nil {
			return err
		}
		if ev.Seq == 2 {
			panic(panicValue{7})
		}
		return nil
	}
	func() {
		defer func() {
			if v := recover(); v != (panicValue{7}) {
				t.Errorf("recovered %#v, want the handler's value", v)
			}
		}()
		in.Apply(context.Background(), lines("r", 1, 3), panicking)
		t.Error("Apply returned")
	}()
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows after the panic", n)
	}
	// The inbox goes on: the writer was given back and the connection is not inside a transaction.
	if rep := mustApply(t, in, lines("r", 1, 3)); rep.Applied != 3 {
		t.Errorf("after the panic: %+v", rep)
	}
}

func TestAHandlerThatCommitsOrRollsBackTheTxOrCallsTheInboxIsRefused(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]func(in *inbox.Inbox) inbox.Handler{
		"commit": func(*inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				insertHandler(ctx, tx, ev)
				return tx.Commit()
			}
		},
		"commit, error ignored": func(*inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				insertHandler(ctx, tx, ev)
				tx.Commit()
				return nil
			}
		},
		"rollback": func(*inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				insertHandler(ctx, tx, ev)
				tx.Rollback()
				return nil
			}
		},
		"COMMIT statement": func(*inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				insertHandler(ctx, tx, ev)
				tx.ExecContext(ctx, `COMMIT`)
				return nil
			}
		},
		"Apply": func(in *inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				_, err := in.Apply(ctx, lines("other", 1, 1), insertHandler)
				return err
			}
		},
		"Release": func(in *inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error { return in.Release(ctx, "r") }
		},
		"Position": func(in *inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				_, err := in.Position(ctx, "r")
				return err
			}
		},
		"WriteTx": func(in *inbox.Inbox) inbox.Handler {
			return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				return in.WriteTx(ctx, func(*sql.Tx) error { return nil })
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, path := setup(t)
			_, err := in.Apply(context.Background(), lines("r", 1, 2), h(in))
			if !errors.Is(err, inbox.ErrTxEnded) && !errors.Is(err, inbox.ErrInHandler) {
				t.Fatalf("Apply: %v, want ErrTxEnded or ErrInHandler", err)
			}
			if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
				t.Errorf("%d rows stored", n)
			}
			if p := position(t, in, "r"); p != 0 {
				t.Errorf("position %d", p)
			}
			if rep := mustApply(t, in, lines("r", 1, 2)); rep.Applied != 2 {
				t.Errorf("afterwards: %+v", rep)
			}
		})
	}
}

func TestEventLineIsTheHandlersToKeep(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	ls := lines("r", 1, 3)
	var kept [][]byte
	_, err := in.Apply(context.Background(), ls, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		kept = append(kept, ev.Line)
		ev.Line[0] = 'X' // the handler's own copy: the inbox's digest and the caller's bytes are not changed
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if l[0] != '{' {
			t.Errorf("line %d: the caller's bytes were changed", i)
		}
		if string(kept[i][1:]) != string(l[1:]) {
			t.Errorf("line %d: the handler got %q", i, kept[i])
		}
	}
	if rep := mustApply(t, in, ls); rep.Duplicates != 3 {
		t.Errorf("re-delivery: %+v (the digest must be of the line's own bytes)", rep)
	}
}

func TestWriteTxCommitsTheConsumersOwnWritesAndAFailedOneNothing(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	ctx := context.Background()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO applied VALUES ('w', 1, x'00')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		tx.Exec(`INSERT INTO applied VALUES ('w', 2, x'00')`)
		return boom
	}); err != boom {
		t.Fatalf("WriteTx: %v, want fn's error as it is", err)
	}
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		tx.Exec(`INSERT INTO applied VALUES ('w', 3, x'00')`)
		return tx.Commit()
	}); !errors.Is(err, inbox.ErrTxEnded) {
		t.Fatalf("WriteTx committing itself: %v", err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}
