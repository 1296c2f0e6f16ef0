// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// applyOnce applies ls with insertHandler and checks each line applied exactly once.
func appliedExactlyOnce(t *testing.T, in *inbox.Inbox, path string, ls [][]byte) {
	t.Helper()
	if _, err := in.Apply(context.Background(), ls, insertHandler); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != len(ls) {
		t.Errorf("%d rows after the next call, want %d", n, len(ls))
	}
}

func TestWithRetryABackoffThatPanicsStoresNothingAndTheNextCallAppliesEachLineOnce(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithRetry(3, func(int) time.Duration { panic("backoff") }))
	ls := [][]byte{line("r", 1), line("r", 2), line("s", 1)}
	calls := 0
	func() {
		defer func() {
			if v := recover(); v != "backoff" {
				t.Errorf("recovered %v, want the backoff's panic", v)
			}
		}()
		in.Apply(context.Background(), ls, failingFor("r", 2, -1, &calls, errors.New("away")))
	}()
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows after the panic, want 0", n)
	}
	appliedExactlyOnce(t, in, path, ls)
}

func TestWithRetryABackoffOfNegativeDurationsRetriesAtOnce(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-1, math.MinInt64} {
		in, path := setup(t, inbox.WithRetry(2, func(int) time.Duration { return d }))
		calls := 0
		rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("r", 2)}, failingFor("r", 2, 2, &calls, errors.New("away")))
		if err != nil || rep.Applied != 2 {
			t.Fatalf("backoff %v: %+v, %v", d, rep, err)
		}
		if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 2 {
			t.Errorf("backoff %v: %d rows, want 2", d, n)
		}
	}
}

func TestWithRetryACallCancelledAtEachAttemptStoresNothingAndTheNextCallAppliesEachLineOnce(t *testing.T) {
	t.Parallel()
	for at := 1; at <= 4; at++ {
		for _, inBackoff := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			attempts := 0
			in, path := setup(t, inbox.WithRetry(3, func(a int) time.Duration {
				if inBackoff && a == at {
					cancel()
					return math.MaxInt64
				}
				return 0
			}))
			h := func(hctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				if err := insertHandler(hctx, tx, ev); err != nil {
					return err
				}
				if ev.RunID != "r" || ev.Seq != 2 {
					return nil
				}
				attempts++
				if !inBackoff && attempts == at {
					cancel()
				}
				return errors.New("away")
			}
			ls := [][]byte{line("s", 1), line("r", 1), line("r", 2), line("s", 2)}
			_, err := in.Apply(ctx, ls, h)
			cancel()
			if at <= 3 || !inBackoff {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled at %d (in the backoff %v): %v, want context.Canceled", at, inBackoff, err)
				}
				if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
					t.Errorf("cancelled at %d (in the backoff %v): %d rows stored", at, inBackoff, n)
				}
				if qs := quarantined(t, in); len(qs) != 0 {
					t.Errorf("cancelled at %d (in the backoff %v): quarantined %v", at, inBackoff, qs)
				}
				appliedExactlyOnce(t, in, path, ls)
			}
		}
	}
}

func TestWithRetryAHandlerThatPanicsRunsOnceAndStoresNothing(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithRetry(5, nil))
	calls := 0
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := insertHandler(ctx, tx, ev); err != nil {
			return err
		}
		if ev.Seq == 2 {
			calls++
			panic("handler")
		}
		return nil
	}
	ls := [][]byte{line("r", 1), line("r", 2)}
	func() {
		defer func() { recover() }()
		in.Apply(context.Background(), ls, h)
	}()
	if calls != 1 {
		t.Errorf("the panicking handler ran %d times, want 1", calls)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows after the panic", n)
	}
	// The goroutine that panicked is no longer taken for a handler's.
	err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		return in.WriteTx(context.Background(), func(*sql.Tx) error { return nil })
	})
	if !errors.Is(err, inbox.ErrCallInsideTx) || errors.Is(err, inbox.ErrInHandler) {
		t.Errorf("a nested WriteTx after a handler's panic: %v, want ErrCallInsideTx alone", err)
	}
	appliedExactlyOnce(t, in, path, ls)
}

func TestARouterHandlerReturningErrQuarantineUnderRetryRunsOnceAndParksTheRun(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithRetry(5, nil))
	calls := 0
	r := inbox.NewRouter()
	r.Handle("t", func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := insertHandler(ctx, tx, ev); err != nil {
			return err
		}
		if ev.RunID == "r" && ev.Seq == 2 {
			calls++
			return errors.Join(errors.New("bad order"), inbox.ErrQuarantine)
		}
		return nil
	})
	rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("r", 2), line("r", 3), line("s", 1)}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || rep.Applied != 2 || rep.Quarantined != 2 {
		t.Errorf("calls %d, report %+v", calls, rep)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
}

type cannotHold struct {
	name string
	h    inbox.Handler
}

func TestDecodeIntoATypeThatCannotHoldTheDataParksTheRunAndTheOthersApply(t *testing.T) {
	t.Parallel()
	called := false
	mark := func() { called = true }
	cases := []cannotHold{
		{"chan", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, chan int) error { mark(); return nil })},
		{"func", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, func()) error { mark(); return nil })},
		{"io.Reader", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, io.Reader) error { mark(); return nil })},
		{"int8", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, int8) error { mark(); return nil })},
		{"struct of int64", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, struct{ N int64 }) error { mark(); return nil })},
		{"map of chans", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, map[string]chan int) error { mark(); return nil })},
		{"complex128", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, complex128) error { mark(); return nil })},
	}
	datas := map[string]string{
		"chan": `{"a":1}`, "func": `"x"`, "io.Reader": `{"a":1}`, "int8": `1e400`,
		"struct of int64": `{"N":123456789012345678901234567890}`, "map of chans": `{"a":1}`, "complex128": `1`,
	}
	for _, c := range cases {
		called = false
		in, _ := setup(t)
		bad := []byte(`{"engine_run_id":"r","seq":1,"type":"t","data":` + datas[c.name] + `}`)
		r := inbox.NewRouter()
		r.Handle("t", c.h)
		rep, err := in.Apply(context.Background(), [][]byte{bad}, r.Route)
		if err != nil || rep.Quarantined != 1 || called {
			t.Errorf("%s: %+v, %v (called %v), want the run quarantined", c.name, rep, err, called)
		}
	}
}

func TestAHandlerContextHookThatPanicsStoresNothingAndTheNextCallAppliesEachLineOnce(t *testing.T) {
	t.Parallel()
	boom := true
	in, path := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		if boom && ev.Seq == 2 {
			panic("hook")
		}
		return nil, nil
	}))
	ls := [][]byte{line("r", 1), line("r", 2)}
	func() {
		defer func() { recover() }()
		in.Apply(context.Background(), ls, insertHandler)
	}()
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows after the panic", n)
	}
	boom = false
	appliedExactlyOnce(t, in, path, ls)
}

func TestAHandlerGivenAContextNotDerivedFromTheInboxsStillCannotCallBackIntoIt(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithHandlerContext(func(ctx context.Context, ev inbox.Event) (context.Context, func(error)) {
		return context.Background(), nil
	}))
	var inner error
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		done := make(chan struct{})
		go func() { // another goroutine, with the context the handler was given
			defer close(done)
			_, inner = in.Apply(ctx, [][]byte{line("x", 1)}, insertNothing)
		}()
		<-done
		return insertHandler(ctx, tx, ev)
	}
	if _, err := in.Apply(context.Background(), [][]byte{line("r", 1)}, h); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, inbox.ErrCallInsideTx) {
		t.Errorf("a call with the handler's context from another goroutine: %v, want ErrCallInsideTx", inner)
	}
}

func TestReadTxRefusesAWrite(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	err := in.ReadTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO applied (run, seq, line) VALUES ('x', 1, 'x')`)
		return err
	})
	if err == nil {
		t.Error("a write inside ReadTx succeeded")
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows written through ReadTx", n)
	}
}
