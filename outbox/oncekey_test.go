// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestConcurrentEnqueueOnceOfOneKeyAnnouncesItOnce: callers racing with one once key, in one group or
// several, store one row; exactly one is told it announces, and the others get (false, 0, nil).
func TestConcurrentEnqueueOnceOfOneKeyAnnouncesItOnce(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			var (
				wg         sync.WaitGroup
				announcing sync.Map
			)
			for w := 0; w < 16; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, seq, err := s.EnqueueOnce(ctx, "r", "unit-1", outboxtest.LineOf("done"))
					switch {
					case err != nil:
						t.Errorf("EnqueueOnce: %v", err)
					case ok != (seq > 0):
						t.Errorf("EnqueueOnce: %v, %d", ok, seq)
					case ok:
						announcing.Store(w, seq)
					}
				}()
			}
			wg.Wait()
			n := 0
			announcing.Range(func(_, seq any) bool {
				n++
				if seq != int64(1) {
					t.Errorf("announced at seq %v, want 1", seq)
				}
				return true
			})
			if n != 1 {
				t.Errorf("%d callers were told they announce, want 1", n)
			}
			checkDense(t, s, 1)
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

func TestMarkAnnouncedRefusesAKeyPendingOnAnotherRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	ok, seq, err := s.EnqueueOnce(ctx, "r", "K", outboxtest.LineOf("once"))
	if err != nil || !ok || seq != 2 {
		t.Fatalf("EnqueueOnce: (%v, %d, %v)", ok, seq, err)
	}
	err = s.MarkAnnounced(ctx, "r", map[int64]string{1: "K"})
	if !errors.Is(err, outbox.ErrAnnounceConflict) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("MarkAnnounced of a key pending on line 2: %v, want ErrAnnounceConflict naming line 2", err)
	}
	if n := outboxtest.CountRows(t, path, "once_key <> ''"); n != 0 {
		t.Errorf("%d ledger rows after a refused MarkAnnounced", n)
	}
	// The relay then projects both lines once and gives the key to the line that carried it.
	j, err := journal.OpenFile(filepath.Join(t.TempDir(), "j.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := outboxtest.FastRelay(t, s, &lineKeyFixer{j}, "r", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if n := outboxtest.CountRows(t, path, "once_key = 'K' AND seq = 2"); n != 1 {
		t.Error("K is not in the ledger under line 2")
	}
	// A key in the ledger under line 2 is refused for line 1 too.
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: "K"}); !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("MarkAnnounced of a key in the ledger for another line: %v", err)
	}
}
