// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestABuilderPanicReachesTheCallerWithItsOwnValueOnEveryPath: whichever path ran the builder (the
// caller's goroutine, the committer's, a batch, the caller's own transaction or WriteTx's), the caller
// recovers its own value, nothing is stored, no number is used and the store keeps working.
func TestABuilderPanicReachesTheCallerWithItsOwnValueOnEveryPath(t *testing.T) {
	onEveryPath(t, func(t *testing.T, p enqueuePath, s *outbox.Store, path string) {
		ctx := context.Background()
		v := recoverPanic(func() {
			p.enqueue(t, s, path, ctx, func(int64) ([]byte, error) { panic(callerPanic{7}) })
		})
		if v != (callerPanic{7}) {
			t.Fatalf("recovered %#v, want the builder's own callerPanic{7}", v)
		}
		seq, err := p.enqueue(t, s, path, ctx, outboxtest.LineOf("after"))
		if err != nil || seq != 2 {
			t.Fatalf("the enqueue after the panic: seq %d, %v; want 2, nil", seq, err)
		}
		checkDense(t, s, 2)
	})
}

// TestADecliningOrFailingBuilderUsesNoNumberOnEveryPath: a nil line stores nothing and returns 0 with
// no error; an error is returned wrapped, with 0; either way the next event takes the next number.
func TestADecliningOrFailingBuilderUsesNoNumberOnEveryPath(t *testing.T) {
	onEveryPath(t, func(t *testing.T, p enqueuePath, s *outbox.Store, path string) {
		ctx := context.Background()
		seq, err := p.enqueue(t, s, path, ctx, outboxtest.ConstLine(nil))
		if seq != 0 || err != nil {
			t.Errorf("declining builder: seq %d, %v; want 0, nil", seq, err)
		}
		seq, err = p.enqueue(t, s, path, ctx, func(int64) ([]byte, error) { return nil, outboxtest.ErrRender })
		if seq != 0 || !errors.Is(err, outboxtest.ErrRender) {
			t.Errorf("failing builder: seq %d, %v; want 0, the builder's error", seq, err)
		}
		if err != nil && strings.Count(err.Error(), "outbox:") > 1 {
			t.Errorf("failing builder: %q names the package more than once", err)
		}
		seq, err = p.enqueue(t, s, path, ctx, func(int64) ([]byte, error) { return []byte("two\nlines"), nil })
		if seq != 0 || !errors.Is(err, outbox.ErrInvalidLine) {
			t.Errorf("invalid line: seq %d, %v; want 0, ErrInvalidLine", seq, err)
		}
		seq, err = p.enqueue(t, s, path, ctx, outboxtest.LineOf("after"))
		if seq != 2 || err != nil {
			t.Fatalf("next enqueue: seq %d, %v; want 2, nil", seq, err)
		}
		checkDense(t, s, 2)
	})
}

// TestAContextCancelledInsideTheBuilderStoresNothingOnEveryPath: the caller is told its context ended,
// and nothing of the call is stored, even where the transaction around it commits.
func TestAContextCancelledInsideTheBuilderStoresNothingOnEveryPath(t *testing.T) {
	onEveryPath(t, func(t *testing.T, p enqueuePath, s *outbox.Store, path string) {
		ctx, cancel := context.WithCancel(context.Background())
		seq, err := p.enqueue(t, s, path, ctx, func(seq int64) ([]byte, error) {
			cancel()
			return fmt.Appendf(nil, "cancelled %d", seq), nil
		})
		if seq != 0 || !errors.Is(err, context.Canceled) {
			t.Errorf("seq %d, %v; want 0, context.Canceled", seq, err)
		}
		seq, err = p.enqueue(t, s, path, ctx, outboxtest.LineOf("x"))
		if seq != 0 || !errors.Is(err, context.Canceled) {
			t.Errorf("already cancelled: seq %d, %v; want 0, context.Canceled", seq, err)
		}
		if seq, err := p.enqueue(t, s, path, context.Background(), outboxtest.LineOf("after")); seq != 2 || err != nil {
			t.Fatalf("next enqueue: seq %d, %v; want 2, nil", seq, err)
		}
		checkDense(t, s, 2)
	})
}

// TestAPanickingBuilderInAGroupLeavesTheStoreWorking: builders that panic, fail or decline on the
// committer's goroutine, among callers whose builders succeed, cost only their own calls: each panic
// reaches its own caller with its own value, every other call is stored under dense numbers, and the
// store is not broken.
func TestAPanickingBuilderInAGroupLeavesTheStoreWorking(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stored = map[int64]string{}
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				switch (w + i) % 4 {
				case 0:
					v := recoverPanic(func() {
						s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { panic(callerPanic{w*100 + i}) })
					})
					if v != (callerPanic{w*100 + i}) {
						t.Errorf("%s recovered %#v, want its own callerPanic{%d}", id, v, w*100+i)
					}
				case 1:
					if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(nil)); seq != 0 || err != nil {
						t.Errorf("%s declined: %d, %v", id, seq, err)
					}
				case 2:
					if seq, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }); seq != 0 || !errors.Is(err, outboxtest.ErrRender) {
						t.Errorf("%s failed: %d, %v", id, seq, err)
					}
				default:
					seq, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) { return fmt.Appendf(nil, "%s %d", id, seq), nil })
					if err != nil {
						t.Errorf("%s: %v", id, err)
						continue
					}
					mu.Lock()
					stored[seq] = fmt.Sprintf("%s %d", id, seq)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	lines := outboxtest.AllLines(t, s, "r")
	if len(lines) != len(stored) {
		t.Fatalf("%d lines stored, %d acknowledged", len(lines), len(stored))
	}
	for i, l := range lines {
		if l.Seq != int64(i+1) || string(l.Line) != stored[l.Seq] {
			t.Errorf("line %d is %d %q, want %q", i+1, l.Seq, l.Line, stored[l.Seq])
		}
	}
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("after")); err != nil {
		t.Fatalf("the store after the panics: %v", err)
	}
}

// TestABatchWithAPanickingFailingOrDecliningBuilderInTheMiddle: EnqueueEvents is all or nothing
// whatever its middle builder does; a decline in the middle takes no number, a panic reaches the
// caller with its own value and the store keeps working.
func TestABatchWithAPanickingFailingOrDecliningBuilderInTheMiddle(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	x := outboxtest.LineOf("x")
	v := recoverPanic(func() {
		s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{x, func(int64) ([]byte, error) { panic(callerPanic{2}) }, x})
	})
	if v != (callerPanic{2}) {
		t.Fatalf("recovered %#v, want callerPanic{2}", v)
	}
	seqs, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{x, func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }, x})
	if seqs != nil || !errors.Is(err, outboxtest.ErrRender) {
		t.Fatalf("failing middle builder: %v, %v", seqs, err)
	}
	ectx, cancel := context.WithCancel(ctx)
	seqs, err = s.EnqueueEvents(ectx, "r", []outbox.EventBuilder{x, func(seq int64) ([]byte, error) { cancel(); return []byte("c"), nil }, x})
	if seqs != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelling middle builder: %v, %v", seqs, err)
	}
	if n := len(outboxtest.AllLines(t, s, "r")); n != 0 {
		t.Fatalf("%d lines stored by failed batches", n)
	}
	seqs, err = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{x, outboxtest.ConstLine(nil), x})
	if err != nil || fmt.Sprint(seqs) != "[1 0 2]" {
		t.Fatalf("declining middle builder: %v, %v; want [1 0 2]", seqs, err)
	}
	checkDense(t, s, 2)
}

// TestABuilderThatCallsGoexitInAGroupFailsItsGroupAndTheStoreGoesOn: with group commit the builder
// runs on the committer's goroutine, where runtime.Goexit (t.FailNow called from a builder) ends that
// goroutine past any recover. The calls of its group must fail, not wait for ever, nothing of the
// group may be stored, and later calls must be served.
func TestABuilderThatCallsGoexitInAGroupFailsItsGroupAndTheStoreGoesOn(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		errc := make(chan error, 1)
		go func() {
			_, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) {
				runtime.Goexit()
				return nil, nil
			})
			errc <- err
		}()
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("a builder that called runtime.Goexit: EnqueueEvent returned nil")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a builder that called runtime.Goexit: EnqueueEvent never returned")
		}
		seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("after"))
		if err != nil || seq != int64(round+1) {
			t.Fatalf("the enqueue after: seq %d, %v; want %d, nil", seq, err, round+1)
		}
	}
	checkDense(t, s, 3)
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the committer was replaced: %v", err)
	}
}

// TestGoexitGroupsAmongManyProducersStoreExactlyTheAcknowledgedEvents: eight producers share the
// committer while some builders call runtime.Goexit and some callers withdraw on short deadlines.
// Every call returns; after Close and a reopen the run is dense, holds every acknowledged line at its
// seq and none of the calls that failed.
func TestGoexitGroupsAmongManyProducersStoreExactlyTheAcknowledgedEvents(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	const producers, calls = 8, 60
	var mu sync.Mutex
	acked := map[int64]string{}
	failed := map[string]bool{}
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				id := fmt.Sprintf("p%d-%d", p, i)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if i%5 == 3 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%3)*100*time.Microsecond)
				}
				var seq int64
				var err error
				done := make(chan struct{})
				go func() { // a Goexit on the caller's goroutine must not end the producer
					defer close(done)
					seq, err = s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) {
						if (p+i)%9 == 4 {
							runtime.Goexit()
						}
						return fmt.Appendf(nil, `{"id":%q}`, id), nil
					})
				}()
				<-done
				cancel()
				mu.Lock()
				if err == nil {
					if prev, ok := acked[seq]; ok {
						t.Errorf("seq %d acknowledged twice: %s and %s", seq, prev, id)
					}
					acked[seq] = id
				} else {
					failed[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	within(t, "the producers", wg.Wait)
	if len(failed) == 0 {
		t.Fatal("no call failed: the builders' runtime.Goexit never ran")
	}
	within(t, "Close", func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	s2, err := outbox.Open(context.Background(), s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	lines := outboxtest.AllLines(t, s2, "r")
	for i, l := range lines {
		if l.Seq != int64(i+1) {
			t.Fatalf("seqs not dense: position %d holds seq %d", i, l.Seq)
		}
		var id string
		if _, err := fmt.Sscanf(string(l.Line), `{"id":%q}`, &id); err != nil {
			t.Fatalf("line %d %q: %v", l.Seq, l.Line, err)
		}
		if failed[id] {
			t.Errorf("seq %d holds %s, whose call failed", l.Seq, id)
		}
		if want, ok := acked[l.Seq]; !ok || want != id {
			t.Errorf("seq %d holds %s, acknowledged as %q", l.Seq, id, want)
		}
	}
	if len(lines) != len(acked) {
		t.Errorf("%d lines stored, %d acknowledged", len(lines), len(acked))
	}
}

// TestGoexitInABuilderOnTheCallersGoroutineLeavesTheWriterFree: in EnqueueEvents, and in EnqueueTx
// inside WriteTx, the builder runs on the caller's goroutine; a runtime.Goexit there ends the caller
// half-way through the store's transaction. Nothing may be stored, and the next WriteTx and the next
// enqueue on every path must work.
func TestGoexitInABuilderOnTheCallersGoroutineLeavesTheWriterFree(t *testing.T) {
	exit := func(int64) ([]byte, error) { runtime.Goexit(); return nil, nil }
	paths := map[string]func(s *outbox.Store){
		"EnqueueEvents": func(s *outbox.Store) {
			s.EnqueueEvents(context.Background(), "r", []outbox.EventBuilder{outboxtest.LineOf("a"), exit})
		},
		"EnqueueTx in WriteTx": func(s *outbox.Store) {
			s.WriteTx(context.Background(), func(tx *sql.Tx) error {
				if _, err := s.EnqueueTx(context.Background(), tx, "r", outboxtest.LineOf("a")); err != nil {
					return err
				}
				_, err := s.EnqueueTx(context.Background(), tx, "r", exit)
				return err
			})
		},
		"EnqueueEvent without group commit": func(s *outbox.Store) {
			s.EnqueueEvent(context.Background(), "r", exit)
		},
	}
	for name, call := range paths {
		t.Run(name, func(t *testing.T) {
			s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(name != "EnqueueEvent without group commit"))
			within(t, name, func() {
				done := make(chan struct{})
				go func() { defer close(done); call(s) }()
				<-done
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			within(t, "the WriteTx after", func() {
				if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
					_, err := s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("tx"))
					return err
				}); err != nil {
					t.Errorf("the WriteTx after: %v", err)
				}
			})
			within(t, "the EnqueueEvent after", func() {
				if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("ev")); err != nil {
					t.Errorf("the EnqueueEvent after: %v", err)
				}
			})
			checkDense(t, s, 2)
			within(t, "Close", func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		})
	}
}
