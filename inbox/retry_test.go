// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
)

// failingFor is insertHandler that, for one line, writes its row and then fails the first `times`
// times it is called (always, for times < 0), counting its calls.
func failingFor(run string, seq int64, times int, calls *int, err error) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if e := insertHandler(ctx, tx, ev); e != nil {
			return e
		}
		if ev.RunID != run || ev.Seq != seq {
			return nil
		}
		*calls++
		if times < 0 || *calls <= times {
			return fmt.Errorf("attempt %d: %w", *calls, err)
		}
		return nil
	}
}

func TestWithRetryAHandlerFailingTwiceThenSucceedingAppliesTheLineOnce(t *testing.T) {
	t.Parallel()
	var waits []int
	in, path := setup(t, inbox.WithRetry(3, func(attempt int) time.Duration {
		waits = append(waits, attempt)
		return time.Millisecond
	}))
	calls := 0
	h := failingFor("r", 2, 2, &calls, errors.New("the rates service is away"))
	rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("s", 1), line("r", 2), line("r", 3)}, h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 4}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if calls != 3 {
		t.Errorf("the handler ran %d times for the line, want 3", calls)
	}
	if fmt.Sprint(waits) != "[1 2]" {
		t.Errorf("the backoff was asked for attempts %v, want [1 2]", waits)
	}
	// Each failed attempt's row was undone: the table's primary key would have refused a second.
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied WHERE run = 'r' AND seq = 2`); n != 1 {
		t.Errorf("%d rows for the retried line, want 1", n)
	}
	if p := position(t, in, "r"); p != 3 {
		t.Errorf("run r at %d, want 3", p)
	}
	if qs := quarantined(t, in); len(qs) != 0 {
		t.Errorf("quarantined: %v", qs)
	}
}

func TestWithRetryAHandlerThatAlwaysFailsQuarantinesOnlyItsRunAndTheOtherRunsApply(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithRetry(2, nil))
	calls := 0
	boom := errors.New("no such customer")
	h := failingFor("r", 2, -1, &calls, boom)
	call := [][]byte{line("r", 1), line("s", 1), line("r", 2), line("s", 2), line("r", 3), line("s", 3)}
	rep, err := in.Apply(context.Background(), call, h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 4, Quarantined: 2}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if calls != 3 {
		t.Errorf("the handler ran %d times for the line, want 1 + 2 retries", calls)
	}
	qs := quarantined(t, in)
	if len(qs) != 1 {
		t.Fatalf("quarantined %v, want run r alone", qs)
	}
	q := qs[0]
	if q.RunID != "r" || q.Reason != "handler" || q.Expected != 2 || q.Got != 2 {
		t.Errorf("quarantine %+v", q)
	}
	if !strings.Contains(q.Detail, "attempt 3: no such customer") || !strings.Contains(q.Detail, "3 times") {
		t.Errorf("the quarantine's detail %q does not hold the last error and the attempts", q.Detail)
	}
	d := rawDB(t, path)
	if n := count(t, d, `SELECT count(*) FROM applied WHERE run = 'r'`); n != 1 {
		t.Errorf("run r has %d rows, want its first line's alone", n)
	}
	if n := count(t, d, `SELECT count(*) FROM applied WHERE run = 's'`); n != 3 {
		t.Errorf("run s has %d rows, want 3", n)
	}
	if p := position(t, in, "s"); p != 3 {
		t.Errorf("run s at %d, want 3", p)
	}

	// The run's later lines wait for an operator, as after any quarantine; the others go on.
	rep, err = in.Apply(context.Background(), [][]byte{line("r", 4), line("s", 4)}, h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 1, Quarantined: 1}, rep); diff != "" {
		t.Errorf("the next call's report (-want +got):\n%s", diff)
	}
}

func TestWithRetryAContextCancelledDuringTheBackoffStopsAtOnceWithNothingStored(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{}, 1)
	in, path := setup(t, inbox.WithRetry(5, func(int) time.Duration {
		waiting <- struct{}{}
		return time.Hour
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-waiting
		cancel()
	}()
	calls := 0
	h := failingFor("r", 1, -1, &calls, errors.New("away"))
	rep, err := in.Apply(ctx, [][]byte{line("s", 1), line("r", 1), line("s", 2)}, h)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply: %v, want context.Canceled", err)
	}
	if rep != (inbox.Report{}) {
		t.Errorf("report %+v beside an error", rep)
	}
	if calls != 1 {
		t.Errorf("the handler ran %d times, want once before the backoff", calls)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows stored by a cancelled call", n)
	}
	for _, run := range []string{"r", "s"} {
		if p := position(t, in, run); p != 0 {
			t.Errorf("run %s at %d after a cancelled call", run, p)
		}
	}
	if qs := quarantined(t, in); len(qs) != 0 {
		t.Errorf("quarantined: %v", qs)
	}
	// The inbox goes on: the same lines apply once the handler succeeds.
	rep, err = in.Apply(context.Background(), [][]byte{line("s", 1), line("r", 1), line("s", 2)}, insertHandler)
	if err != nil || rep.Applied != 3 {
		t.Fatalf("the next call: %+v, %v", rep, err)
	}
}

func TestWithRetryAHandlerErrorAfterTheCallsContextEndedFailsTheCallAndQuarantinesNothing(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithRetry(5, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	h := func(hctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		calls++
		cancel()
		return hctx.Err()
	}
	if _, err := in.Apply(ctx, [][]byte{line("r", 1)}, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply: %v, want context.Canceled", err)
	}
	if calls != 1 {
		t.Errorf("the handler ran %d times, want once", calls)
	}
	if qs := quarantined(t, in); len(qs) != 0 {
		t.Errorf("quarantined: %v", qs)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM inbox_runs`); n != 0 {
		t.Errorf("%d runs stored by a cancelled call", n)
	}
}

func TestWithRetryZeroQuarantinesAtTheFirstFailureWithoutRunningTheHandlerAgain(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithRetry(0, func(int) time.Duration { t.Error("a backoff was asked for"); return 0 }))
	calls := 0
	rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("s", 1)}, failingFor("r", 1, -1, &calls, errors.New("bad")))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || rep != (inbox.Report{Applied: 1, Quarantined: 1}) {
		t.Errorf("%d calls, report %+v", calls, rep)
	}
}

func TestWithRetryRefusesACountOutsideItsRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, inbox.MaxRetries + 1} {
		path := filepath.Join(t.TempDir(), "consumer.db")
		if in, err := inbox.Open(context.Background(), path, inbox.WithRetry(n, nil)); err == nil {
			in.Close()
			t.Errorf("WithRetry(%d) was taken", n)
		}
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
