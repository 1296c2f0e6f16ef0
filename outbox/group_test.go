package outbox

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
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

// TestAFailedGroupFailsEveryCallInIt holds the committer inside a first commit, queues a group behind
// it whose one INSERT fails (a trigger refuses it), and checks that every call of that group gets an
// error and none of them is stored.
func TestAFailedGroupFailsEveryCallInIt(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON events_outbox WHEN NEW.line = CAST('refuse' AS BLOB)
			BEGIN SELECT RAISE(ABORT, 'refused'); END`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hold, release := holdFirstCommit(t)

	first := make(chan error, 1)
	go func() { _, err := s.EnqueueEvent(ctx, "r", line("first")); first <- err }()
	<-hold // the committer is inside the first group's commit

	const n = 20
	errs := make(chan error, n+1)
	for i := 0; i < n; i++ {
		go func() { _, err := s.EnqueueEvent(ctx, "r", line("ok")); errs <- err }()
	}
	go func() { _, err := s.EnqueueEvent(ctx, "r", line("refuse")); errs <- err }()
	for deadline := time.Now().Add(10 * time.Second); len(s.group.queue) < n+1; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls queued", len(s.group.queue))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	for i := 0; i < n+1; i++ {
		if err := <-errs; err == nil {
			t.Error("a call of the failed group succeeded")
		}
	}
	lines, _ := s.PendingEvents(ctx, "r", 0, 100)
	if len(lines) != 1 {
		t.Errorf("%d lines stored, want only the first call's", len(lines))
	}
	if seq, err := s.EnqueueEvent(ctx, "r", line("after")); err != nil || seq != 2 {
		t.Errorf("next call: (%d, %v), want seq 2", seq, err)
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
