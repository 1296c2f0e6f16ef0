// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// within runs fn on a goroutine of its own and fails the test if fn has not returned in a minute: a
// wedged writer must fail the test, not hang it.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s never returned", what)
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

// TestCloseRacingAGoexitGroupReturns: Close called while the committer's goroutine is being ended by
// a builder's runtime.Goexit and replaced must return, and the calls must all have returned.
func TestCloseRacingAGoexitGroupReturns(t *testing.T) {
	for round := 0; round < 10; round++ {
		s, _ := outboxtest.Setup(t)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.EnqueueEvent(context.Background(), "r", func(seq int64) ([]byte, error) {
					if i%2 == 0 {
						runtime.Goexit()
					}
					return []byte(`{"x":1}`), nil
				})
			}()
		}
		within(t, "Close racing a Goexit group", func() { s.Close() })
		within(t, "the enqueues after Close", wg.Wait)
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

// TestAOnceKeyWhoseInsertATriggerFailedIsFreeToAnnounceAgain: a trigger's RAISE(FAIL) keeps the row it
// wrote; the row carries the once key, so if it stayed the key would count as announced for ever.
func TestAOnceKeyWhoseInsertATriggerFailedIsFreeToAnnounceAgain(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			exec := func(q string) {
				t.Helper()
				if err := s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := tx.Exec(q); return err }); err != nil {
					t.Fatal(err)
				}
			}
			exec(`CREATE TRIGGER fail_k AFTER INSERT ON events_outbox
				WHEN NEW.announce_key = 'k' BEGIN SELECT RAISE(FAIL, 'refused after'); END`)
			announcing, seq, err := s.EnqueueOnce(ctx, "r", "k", outboxtest.LineOf("once"))
			if err == nil {
				t.Fatalf("EnqueueOnce under RAISE(FAIL): announcing %v seq %d, nil error", announcing, seq)
			}
			exec(`DROP TRIGGER fail_k`)
			announcing, seq, err = s.EnqueueOnce(ctx, "r", "k", outboxtest.LineOf("once"))
			if err != nil || !announcing || seq != 1 {
				t.Fatalf("EnqueueOnce after the trigger is gone: announcing %v seq %d, %v; want true 1 nil", announcing, seq, err)
			}
			checkDense(t, s, 1)
		})
	}
}

// TestEnqueueTxAfterTheCallersOwnRowAtTheNextSeq: a caller that inserts a row at the run's next seq by
// raw SQL in WriteTx, then calls EnqueueTx, must get either an error or a seq of its own; never a
// seq that names the caller's row.
func TestEnqueueTxAfterTheCallersOwnRowAtTheNextSeq(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	outboxtest.MustEnqueue(t, s, "r")
	var seq int64
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('r', 2, '{"raw":2}')`); err != nil {
			return err
		}
		var err error
		seq, err = s.EnqueueTx(ctx, tx, "r", outboxtest.LineOf("tx"))
		return err
	})
	lines := outboxtest.AllLines(t, s, "r")
	if err != nil {
		if len(lines) != 1 {
			t.Fatalf("WriteTx failed (%v) but run r holds %d lines", err, len(lines))
		}
		return
	}
	if seq != 3 || len(lines) != 3 || string(lines[1].Line) != `{"raw":2}` {
		t.Fatalf("EnqueueTx after the caller's row 2: seq %d, lines %v", seq, lines)
	}
}

// TestAnInsertATriggerIgnoredIsNotReportedAsStored: RAISE(IGNORE) in a BEFORE INSERT trigger skips the
// insert without an error. The call must not be acknowledged with a seq that holds no line, and the
// next call must still be numbered densely.
func TestAnInsertATriggerIgnoredIsNotReportedAsStored(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`CREATE TRIGGER ignore_bad BEFORE INSERT ON events_outbox
					WHEN NEW.engine_run_id = 'r' AND (CAST(NEW.line AS TEXT) = '{"skip":1}' OR NEW.spill <> 0) BEGIN SELECT RAISE(IGNORE); END`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine([]byte(`{"skip":1}`)))
			if err == nil {
				t.Errorf("an insert the trigger ignored: EnqueueEvent returned seq %d, nil; run r holds %d lines",
					seq, len(outboxtest.AllLines(t, s, "r")))
			}
			large := []byte(`{"skip":"` + strings.Repeat("x", 2000) + `"}`)
			if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(large)); err == nil {
				t.Errorf("a large insert the trigger ignored: EnqueueEvent returned seq %d, nil", seq)
			}
			var spilled int
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				return tx.QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled)
			}); err != nil || spilled != 0 {
				t.Errorf("events_lines holds %d lines (%v) after the ignored large insert, want 0", spilled, err)
			}
			if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("next")); err != nil || seq != 1 {
				t.Errorf("the next EnqueueEvent: seq %d, %v; want 1, nil", seq, err)
			}
			checkDense(t, s, 1)
		})
	}
}

// TestAOnceKeyInAGroupAGoexitRolledBackIsFreeAgain: calls with once keys and large lines that wait
// behind a busy committer share a group with a builder that calls runtime.Goexit. Whatever each call
// was told is what the store holds: a key whose call failed announces on the next EnqueueOnce, a key
// whose call succeeded does not, and the run is dense.
func TestAOnceKeyInAGroupAGoexitRolledBackIsFreeAgain(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		hold, held := make(chan struct{}), make(chan struct{})
		busy := make(chan error, 1)
		go func() {
			_, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) {
				close(held)
				<-hold
				return []byte(`{"busy":1}`), nil
			})
			busy <- err
		}()
		<-held
		type outcome struct {
			key string
			err error
		}
		outcomes := make(chan outcome, 4)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			key := fmt.Sprintf("k%d-%d", round, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, err := s.EnqueueOnce(ctx, "r", key, func(seq int64) ([]byte, error) {
					return []byte(`{"large":"` + strings.Repeat("y", 3000) + `"}`), nil
				})
				outcomes <- outcome{key, err}
			}()
		}
		exited := make(chan error, 1)
		go func() {
			_, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { runtime.Goexit(); return nil, nil })
			exited <- err
		}()
		time.Sleep(20 * time.Millisecond) // lets the calls queue behind the busy builder; not asserted
		close(hold)
		if err := <-busy; err != nil {
			t.Fatalf("the busy call: %v", err)
		}
		within(t, "the calls of the group", wg.Wait)
		if err := <-exited; err == nil {
			t.Fatal("the call whose builder called runtime.Goexit returned nil")
		}
		close(outcomes)
		for o := range outcomes {
			announcing, _, err := s.EnqueueOnce(ctx, "r", o.key, outboxtest.LineOf("again"))
			if err != nil || announcing != (o.err != nil) {
				t.Errorf("key %s, first call %v: EnqueueOnce again announcing %v, %v", o.key, o.err, announcing, err)
			}
		}
	}
	lines := outboxtest.AllLines(t, s, "r")
	checkDense(t, s, int64(len(lines)))
}
