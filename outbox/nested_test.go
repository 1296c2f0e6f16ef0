// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// storeWrites are the store's write methods, each called as a nested caller would.
var storeWrites = map[string]func(ctx context.Context, s *outbox.Store) error{
	"EnqueueEvent": func(ctx context.Context, s *outbox.Store) error {
		_, err := s.EnqueueEvent(ctx, "inner", outboxtest.LineOf("x"))
		return err
	},
	"EnqueueOnce": func(ctx context.Context, s *outbox.Store) error {
		_, _, err := s.EnqueueOnce(ctx, "inner", "k", outboxtest.LineOf("x"))
		return err
	},
	"EnqueueEvents": func(ctx context.Context, s *outbox.Store) error {
		_, err := s.EnqueueEvents(ctx, "inner", []outbox.EventBuilder{outboxtest.LineOf("x")})
		return err
	},
	"WriteTx": func(ctx context.Context, s *outbox.Store) error {
		return s.WriteTx(ctx, func(*sql.Tx) error { return nil })
	},
	"MarkAnnounced": func(ctx context.Context, s *outbox.Store) error {
		return s.MarkAnnounced(ctx, "inner", map[int64]string{1: "k"})
	},
	"ForgetEvents": func(ctx context.Context, s *outbox.Store) error {
		_, err := s.ForgetEvents(ctx, "inner")
		return err
	},
}

func TestAWriteCalledFromInsideWriteTxFailsAtOnceSayingItIsACallFromInsideATransaction(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		for name, call := range storeWrites {
			t.Run(fmt.Sprintf("%s/group=%v", name, group), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
				var inner error
				err := s.WriteTx(ctx, func(tx *sql.Tx) error {
					inner = call(ctx, s)
					_, err := s.EnqueueTx(ctx, tx, "outer", outboxtest.LineOf("y"))
					return err
				})
				if !errors.Is(inner, outbox.ErrCallInsideTx) {
					t.Fatalf("the nested call: %v; want ErrCallInsideTx", inner)
				}
				if err != nil {
					t.Fatalf("WriteTx: %v", err)
				}
				// The store goes on, from the same goroutine, now that it holds nothing.
				if err := call(ctx, s); errors.Is(err, outbox.ErrCallInsideTx) {
					t.Fatalf("after WriteTx: %v", err)
				}
			})
		}
	}
}

func TestABuilderThatCallsTheStoreFailsAtOnceSayingItIsACallFromInsideATransaction(t *testing.T) {
	t.Parallel()
	for _, group := range []bool{true, false} {
		for name, call := range storeWrites {
			t.Run(fmt.Sprintf("%s/group=%v", name, group), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
				_, err := s.EnqueueEvent(ctx, "outer", func(seq int64) ([]byte, error) {
					if err := call(ctx, s); err != nil {
						return nil, err
					}
					return []byte("x"), nil
				})
				if !errors.Is(err, outbox.ErrCallInsideTx) {
					t.Fatalf("EnqueueEvent whose builder calls %s: %v; want ErrCallInsideTx", name, err)
				}
				if seq, err := s.EnqueueEvent(ctx, "outer", outboxtest.LineOf("ok")); err != nil || seq != 1 {
					t.Fatalf("next enqueue: %d, %v; want seq 1", seq, err)
				}
			})
		}
	}
}

func TestReadTxReadsOneSnapshotAndNeverTakesTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("a")); err != nil {
		t.Fatal(err)
	}
	count := func(tx *sql.Tx) (n int) {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM events_outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Inside WriteTx's function the writer is held; ReadTx goes on beside it, and a commit made while
	// the snapshot is open is not seen by it.
	err := s.WriteTx(ctx, func(*sql.Tx) error {
		return s.ReadTx(ctx, func(tx *sql.Tx) error {
			if n := count(tx); n != 1 {
				t.Errorf("first read: %d rows; want 1", n)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.ReadTx(ctx, func(tx *sql.Tx) error {
		first := count(tx)
		done := make(chan error)
		go func() { _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("b")); done <- err }()
		if err := <-done; err != nil {
			return err
		}
		if n := count(tx); n != first {
			t.Errorf("the snapshot moved from %d rows to %d", first, n)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM events_outbox`); err == nil {
			t.Error("a write in ReadTx succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	errMine := errors.New("mine")
	if err := s.ReadTx(ctx, func(*sql.Tx) error { return errMine }); err != errMine {
		t.Errorf("fn's error came back as %v", err)
	}
	ro, err := outbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.ReadTx(ctx, func(tx *sql.Tx) error {
		if n := count(tx); n != 2 {
			t.Errorf("read-only store: %d rows; want 2", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestAPanicInReadTxIsTheCallersAndLeavesTheStoreUsable(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	func() {
		defer func() {
			if v := recover(); v != "mine" {
				t.Errorf("recovered %v", v)
			}
		}()
		s.ReadTx(context.Background(), func(*sql.Tx) error { panic("mine") })
	}()
	if err := s.ReadTx(context.Background(), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	if _, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("a")); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
}

// relayCalls are a relay's calls, each made as a nested caller would.
var relayCalls = map[string]func(ctx context.Context, r *outbox.Relay) error{
	"Flush":   func(ctx context.Context, r *outbox.Relay) error { return r.Flush(ctx) },
	"Recover": func(ctx context.Context, r *outbox.Relay) error { return r.Recover(ctx) },
	"Run":     func(ctx context.Context, r *outbox.Relay) error { return r.Run(ctx) },
}

// A relay called from inside a transaction of its store (a WriteTx function, a builder) would record
// its batches with the writer that transaction holds. It fails at once with ErrCallInsideTx, before
// it appends anything: a batch appended then could not be recorded, and the relay's record would wait
// for the writer until the operation timeout.
func TestARelayCalledFromInsideATransactionFailsAtOnceAndAppendsNothing(t *testing.T) {
	inside := map[string]func(s *outbox.Store, call func() error) error{
		"WriteTx": func(s *outbox.Store, call func() error) error {
			return s.WriteTx(context.Background(), func(*sql.Tx) error { return call() })
		},
		"builder": func(s *outbox.Store, call func() error) error {
			_, err := s.EnqueueEvent(context.Background(), "outer", func(int64) ([]byte, error) {
				return []byte("x"), call()
			})
			return err
		},
	}
	for where, in := range inside {
		for _, group := range []bool{true, false} {
			for name, call := range relayCalls {
				t.Run(fmt.Sprintf("%s/%s/group=%v", where, name, group), func(t *testing.T) {
					opts := []outbox.Option{outbox.WithGroupCommit(group), outbox.WithOpTimeout(time.Minute)}
					s := openStore(t, opts...)
					ctx := context.Background()
					enqueueSpends(t, s, 30)
					// Reopened, the run is an earlier process's, which Recover projects too.
					s = outboxtest.Reopen(t, s, opts...)
					run := "run"
					if name == "Recover" {
						run = "later"
					}
					sink := outboxtest.NewMemSink()
					r := outboxtest.NewRelay(t, s, sink, run, outbox.WithBatchSize(10))
					var inner error
					done := make(chan error, 1)
					go func() {
						done <- in(s, func() error {
							inner = call(ctx, r)
							return inner
						})
					}()
					select {
					case <-done:
					case <-time.After(liveness):
						t.Fatalf("%s from inside a transaction did not return", name)
					}
					if !errors.Is(inner, outbox.ErrCallInsideTx) {
						t.Errorf("%s from inside a transaction: %v, want ErrCallInsideTx", name, inner)
					}
					if got := len(sink.All()); got != 0 {
						t.Errorf("the sink got %d lines from a relay that could not record them", got)
					}
					// Outside the transaction the same relay projects everything.
					after := r.Flush
					if name == "Recover" {
						after = r.Recover
					}
					if err := after(ctx); err != nil {
						t.Fatal(err)
					}
					if got := len(sink.All()); got != 30 {
						t.Errorf("the sink holds %d lines after the relay ran outside, want 30", got)
					}
				})
			}
		}
	}
}

// nestedEnqueue is a builder that calls the store, as a careless one would, and says what it was told.
func nestedEnqueue(s *outbox.Store, told chan<- error) outbox.EventBuilder {
	return func(int64) ([]byte, error) {
		_, err := s.EnqueueEvent(context.Background(), "inner", outboxtest.LineOf("x"))
		told <- err
		return []byte("x"), err
	}
}

// enqueueWithin makes an EnqueueEvent with build and fails the test when it has not returned within
// the liveness bound: a nested call that is not caught waits for itself until the operation timeout.
func enqueueWithin(t *testing.T, s *outbox.Store, ctx context.Context, build outbox.EventBuilder) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.EnqueueEvent(ctx, "outer", build)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(liveness):
		t.Fatal("EnqueueEvent did not return")
		return nil
	}
}

// The committer marks its goroutine as the writer's only while a builder or the line check runs, and
// reads that goroutine once per loop. A line check that calls the store is caught as a builder is,
// with group commit on and off; and after the committer's goroutine was replaced (a builder called
// runtime.Goexit, or outlived its caller's context and its group was taken over), a builder that
// calls the store on the new goroutine is still caught at once.
func TestTheCommittersNestedCallCheckHoldsForLineChecksAndAfterItsGoroutineIsReplaced(t *testing.T) {
	ctx := context.Background()
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("line check/group=%v", group), func(t *testing.T) {
			var s *outbox.Store
			told := make(chan error, 1)
			s = openStore(t, outbox.WithGroupCommit(group), outbox.WithOpTimeout(time.Minute),
				outbox.WithLineCheck(func(runID string, _ int64, _ []byte) error {
					if runID != "outer" {
						return nil
					}
					_, err := s.EnqueueEvent(context.Background(), "inner", outboxtest.LineOf("x"))
					told <- err
					return err
				}))
			if err := enqueueWithin(t, s, ctx, outboxtest.LineOf("y")); !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Errorf("EnqueueEvent whose line check calls the store: %v, want ErrCallInsideTx", err)
			}
			if err := <-told; !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Errorf("the line check's call: %v, want ErrCallInsideTx", err)
			}
		})
	}
	t.Run("after Goexit", func(t *testing.T) {
		s := openStore(t, outbox.WithOpTimeout(time.Minute))
		for round := range 3 {
			err := enqueueWithin(t, s, ctx, func(int64) ([]byte, error) { runtime.Goexit(); return nil, nil })
			if err == nil {
				t.Fatalf("round %d: a builder that called runtime.Goexit: nil error", round)
			}
			told := make(chan error, 1)
			if err := enqueueWithin(t, s, ctx, nestedEnqueue(s, told)); !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Fatalf("round %d: a nested call on the new committer: %v, want ErrCallInsideTx", round, err)
			}
			if err := <-told; !errors.Is(err, outbox.ErrCallInsideTx) {
				t.Fatalf("round %d: the builder was told %v, want ErrCallInsideTx", round, err)
			}
		}
	})
	t.Run("after a panic", func(t *testing.T) {
		s := openStore(t, outbox.WithOpTimeout(time.Minute))
		func() {
			defer func() {
				if v := recover(); v != "the builder's bug" {
					t.Errorf("a panicking builder: recovered %v", v)
				}
			}()
			s.EnqueueEvent(ctx, "outer", func(int64) ([]byte, error) { panic("the builder's bug") })
		}()
		told := make(chan error, 1)
		if err := enqueueWithin(t, s, ctx, nestedEnqueue(s, told)); !errors.Is(err, outbox.ErrCallInsideTx) {
			t.Fatalf("a nested call after a panicking builder: %v, want ErrCallInsideTx", err)
		}
		<-told
		// And the mark is gone with the builder: this goroutine's own calls go through.
		if _, err := s.EnqueueEvent(ctx, "outer", outboxtest.LineOf("after")); err != nil {
			t.Fatalf("the store after the panic: %v", err)
		}
	})
	t.Run("after a takeover", func(t *testing.T) {
		s := openStore(t, outbox.WithOpTimeout(time.Minute))
		release := make(chan struct{})
		stuckTold := make(chan error, 1)
		entered := make(chan struct{})
		stuck := func(int64) ([]byte, error) {
			close(entered)
			<-release
			// Called once the builder returns from its wait, its group long taken over.
			_, err := s.EnqueueEvent(context.Background(), "late", outboxtest.LineOf("x"))
			stuckTold <- err
			return []byte("stuck"), nil
		}
		// The caller gives up once its builder runs, not at a deadline: one that passed while the
		// call was still queued, on a loaded machine, would withdraw it before any builder ran.
		short, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { <-entered; cancel() }()
		if err := enqueueWithin(t, s, short, stuck); !errors.Is(err, outbox.ErrBuilderStuck) {
			t.Fatalf("a builder still running when its caller gave up: %v, want ErrBuilderStuck", err)
		}
		told := make(chan error, 1)
		if err := enqueueWithin(t, s, ctx, nestedEnqueue(s, told)); !errors.Is(err, outbox.ErrCallInsideTx) {
			t.Fatalf("a nested call on the goroutine that took the group over: %v, want ErrCallInsideTx", err)
		}
		<-told
		close(release)
		select {
		case err := <-stuckTold:
			// Its goroutine no longer holds the writer: whether the call is caught as nested (the mark
			// is still its own) or served, it must not wait for itself.
			t.Logf("the stuck builder's own call, once it returned: %v", err)
		case <-time.After(liveness):
			t.Fatal("the stuck builder's call, once it returned, did not return")
		}
		if _, err := s.EnqueueEvent(ctx, "outer", outboxtest.LineOf("after")); err != nil {
			t.Fatalf("the store after the takeover: %v", err)
		}
	})
}

// RetireEvent called from inside a transaction of the store while a relay of the run has a batch in
// flight: the relay holds the run's turn and waits for its record, which waits for the writer the
// transaction holds. RetireEvent fails at once with ErrCallInsideTx instead of waiting for that turn
// until the record gives up.
func TestRetireEventFromInsideATransactionFailsAtOnceWhileARelayHoldsTheTurn(t *testing.T) {
	s := openStore(t, outbox.WithOpTimeout(time.Minute), outbox.WithBusyTimeout(time.Minute))
	enqueueSpends(t, s, 30)
	appended := make(chan struct{})
	sink := &hookedSink{sink: outboxtest.NewMemSink(), after: func(call int) {
		if call == 1 {
			close(appended)
		}
	}}
	r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10))
	flushed := make(chan error, 1)
	var inner error
	done := make(chan error, 1)
	go func() {
		done <- s.WriteTx(context.Background(), func(*sql.Tx) error {
			go func() { flushed <- r.Flush(context.Background()) }()
			<-appended // batch 1's record waits for this transaction's writer
			inner = s.RetireEvent(context.Background(), "run", 25, "attack")
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(liveness):
		t.Fatal("RetireEvent from inside WriteTx did not return")
	}
	if !errors.Is(inner, outbox.ErrCallInsideTx) {
		t.Errorf("RetireEvent from inside WriteTx: %v, want ErrCallInsideTx", inner)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
}
