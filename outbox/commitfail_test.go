// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// grouped runs n concurrent EnqueueEvent calls of run "r" with context.Background() and returns the
// lines acknowledged and the errors of the others.
func grouped(s *outbox.Store, n int) (map[int64][]byte, []error) {
	var (
		mu    sync.Mutex
		acked = map[int64][]byte{}
		errs  []error
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var line []byte
			seq, err := s.EnqueueEvent(context.Background(), "r", func(seq int64) ([]byte, error) {
				line = fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"caller":%d}`, seq, i)
				return line, nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			acked[seq] = line
		}()
	}
	close(start)
	wg.Wait()
	return acked, errs
}

// TestAFailedGroupCommitIsNeverTheCallersCancellation fails one write or sync of the disk at each
// place a burst of concurrent callers reaches, under group commit, and checks that no caller, all of
// whose contexts never end, is told context.Canceled or context.DeadlineExceeded: a caller that takes
// those for its own shutdown would drop a failed enqueue without a word. A full disk says ENOSPC, and
// what was acknowledged is stored.
func TestAFailedGroupCommitIsNeverTheCallersCancellation(t *testing.T) {
	t.Parallel()
	const callers = 48
	_, v, _, _ := outboxtest.FaultStore(t, func(*faultvfs.VFS) {})
	setup := v.Calls()
	for _, full := range []bool{false, true} {
		failed := 0
		for at := setup + 1; at <= setup+16; at++ {
			s, _, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) {
				v.FailAt = at
				if full {
					v.FailWith = sqlite3.FULL
				}
			})
			acked, errs := grouped(s, callers)
			for _, err := range errs {
				if errors.Is(err, outbox.ErrNotDurable) || errors.Is(err, outbox.ErrSyncFailed) {
					continue
				}
				failed++
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("fault at call %d (full disk %v): %v, which wraps a context's end that never happened", at, full, err)
					break
				}
				if full && !errors.Is(err, syscall.ENOSPC) {
					t.Errorf("full disk at call %d: %v, want ENOSPC", at, err)
					break
				}
			}
			s.Close()
			outboxtest.CheckDurable(t, fmt.Sprintf("fault at call %d (full disk %v)", at, full), path, acked)
		}
		if failed == 0 {
			t.Errorf("no fault (full disk %v) failed a grouped call", full)
		}
	}
}
