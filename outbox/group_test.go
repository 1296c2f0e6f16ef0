// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// holdFirstCommit stops the committer inside its next commit: hold is closed once it is there, and it
// goes on when release is closed.
func holdFirstCommit(t *testing.T) (hold, release chan struct{}) {
	hold, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	faultpoint.Set(func(p string) {
		if p == faultpoint.BeforeCommit {
			once.Do(func() { close(hold); <-release })
		}
	})
	t.Cleanup(func() { faultpoint.Set(nil) })
	return hold, release
}

func line(b string) EventBuilder { return func(int64) ([]byte, error) { return []byte(b), nil } }

// queueGroupBehindAHeldCommit holds the committer inside a first commit, queues n calls with line "ok"
// and one with line "refuse" behind it as one group, lets it go, and returns the first call's error,
// the n calls' errors and the refused call's.
func queueGroupBehindAHeldCommit(t *testing.T, s *Store, n int) (first error, oks []error, refused error) {
	hold, release := holdFirstCommit(t)
	firstc := make(chan error, 1)
	go func() { _, err := s.EnqueueEvent(context.Background(), "r", line("first")); firstc <- err }()
	<-hold // the committer is inside the first group's commit
	okc := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { _, err := s.EnqueueEvent(context.Background(), "r", line("ok")); okc <- err }()
	}
	refusedc := make(chan error, 1)
	go func() { _, err := s.EnqueueEvent(context.Background(), "other", line("refuse")); refusedc <- err }()
	for deadline := time.Now().Add(10 * time.Second); len(s.group.queue) < n+1; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls queued", len(s.group.queue))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	first = <-firstc
	for i := 0; i < n; i++ {
		oks = append(oks, <-okc)
	}
	return first, oks, <-refusedc
}

func storeWithTrigger(t *testing.T, raise string) *Store {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON events_outbox WHEN NEW.line = CAST('refuse' AS BLOB)
			BEGIN SELECT RAISE(` + raise + `, 'refused'); END`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOneCallsFailedInsertFailsOnlyThatCall queues a group in which one call's INSERT fails (a
// trigger aborts it): that call gets an error naming its own run, and every other call of the group
// commits.
func TestOneCallsFailedInsertFailsOnlyThatCall(t *testing.T) {
	s := storeWithTrigger(t, "ABORT")
	const n = 20
	first, oks, refused := queueGroupBehindAHeldCommit(t, s, n)
	if first != nil {
		t.Fatalf("first call: %v", first)
	}
	for _, err := range oks {
		if err != nil {
			t.Errorf("a call beside the failed one failed: %v", err)
		}
	}
	if refused == nil || !strings.Contains(refused.Error(), `run "other"`) || strings.Contains(refused.Error(), `run "r"`) {
		t.Errorf("the failing call: %v, want an error naming its own run", refused)
	}
	lines, _ := s.PendingEvents(context.Background(), "r", 0, 100)
	if len(lines) != n+1 {
		t.Errorf("%d lines stored, want %d", len(lines), n+1)
	}
	if seq, err := s.EnqueueEvent(context.Background(), "r", line("after")); err != nil || seq != n+2 {
		t.Errorf("next call: (%d, %v), want seq %d", seq, err, n+2)
	}
}

// TestAGroupWhoseTransactionSQLiteEndedFailsTheCallsInIt queues a group in which one call's INSERT
// makes SQLite roll the whole transaction back (RAISE(ROLLBACK)): every call that ran in that
// transaction fails and none of them is stored; the calls queued after it go on in the next group;
// and the store goes on, numbering densely.
func TestAGroupWhoseTransactionSQLiteEndedFailsTheCallsInIt(t *testing.T) {
	s := storeWithTrigger(t, "ROLLBACK")
	const n = 20
	first, oks, refused := queueGroupBehindAHeldCommit(t, s, n)
	if first != nil {
		t.Fatalf("first call: %v", first)
	}
	if refused == nil {
		t.Error("the call SQLite refused succeeded")
	}
	succeeded := 0
	for _, err := range oks {
		if err == nil {
			succeeded++
		}
	}
	lines, _ := s.PendingEvents(context.Background(), "r", 0, 100)
	if len(lines) != 1+succeeded {
		t.Errorf("%d lines stored, want the first call's and the %d that succeeded", len(lines), succeeded)
	}
	for i, l := range lines {
		if l.Seq != int64(i+1) {
			t.Fatalf("stored seqs are not dense: %d at %d", l.Seq, i)
		}
	}
	if seq, err := s.EnqueueEvent(context.Background(), "r", line("after")); err != nil || seq != int64(succeeded+2) {
		t.Errorf("next call: (%d, %v), want seq %d", seq, err, succeeded+2)
	}
}

// TestAQueuedCallWithdrawsWhenItsContextEnds: a caller whose context ends before the committer takes
// its call returns the context's error, and its builder never runs.
func TestAQueuedCallWithdrawsWhenItsContextEnds(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hold, release := holdFirstCommit(t)
	go s.EnqueueEvent(ctx, "r", line("first"))
	<-hold
	cctx, cancel := context.WithCancel(ctx)
	built := false
	done := make(chan error, 1)
	go func() {
		_, err := s.EnqueueEvent(cctx, "r", func(int64) ([]byte, error) { built = true; return []byte("x"), nil })
		done <- err
	}()
	for len(s.group.queue) < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("withdrawn call: %v, want context.Canceled", err)
	}
	close(release)
	if seq, err := s.EnqueueEvent(ctx, "r", line("next")); err != nil || seq != 2 || built {
		t.Errorf("next call: (%d, %v), withdrawn builder ran: %v", seq, err, built)
	}
}

// TestTheCommitterWaitsBoundedlyForCallersThatDoNotComeBack: the committer waits for as many callers
// as the last sync released before it begins a group, but only for a moment; callers that went off to
// other work do not hold up the one that came back.
func TestTheCommitterWaitsBoundedlyForCallersThatDoNotComeBack(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.dur.released.Store(1000) // as if the last sync had released a thousand callers
	done := make(chan error, 1)
	go func() {
		_, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) { return []byte(`{"seq":1}`), nil })
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lone call is still waiting for callers that never came")
	}
	if got := s.dur.released.Load(); got != 1 {
		t.Errorf("the sync after a lone call released %d callers, want 1", got)
	}
}

// TestALongFirstLineDoesNotSizeThePendingReadForABatchOfThem: the pending read sizes its buffer from
// the first line, within a bound; a 1 MiB line read with a limit of 1,000 must not reserve a gigabyte.
func TestALongFirstLineDoesNotSizeThePendingReadForABatchOfThem(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := make([]byte, 1<<20)
	for i := range long {
		long[i] = 'x'
	}
	for _, l := range [][]byte{long, []byte(`{"seq":2}`), []byte(`{"seq":3}`)} {
		if _, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { return l, nil }); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	lines, err := s.PendingEvents(ctx, "r", 0, 1000)
	runtime.ReadMemStats(&after)
	if err != nil || len(lines) != 3 || len(lines[0].Line) != 1<<20 {
		t.Fatalf("PendingEvents: %d lines, %v", len(lines), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("reading 1 MiB of lines allocated %d MiB", grew>>20)
	}
}
