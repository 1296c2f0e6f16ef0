// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// follow runs FollowFile on path until the returned stop is called, which returns what FollowFile
// returned.
func (c *consumer) follow(path string, h Handler) (stop func() error) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.in.FollowFile(ctx, path, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				c.t.Fatal("FollowFile did not return in a minute after its context ended")
			}
		})
		return err
	}
	c.t.Cleanup(func() { stop() })
	return stop
}

// waitPosition waits until run's high-water mark is n, failing the test after a minute (a hang,
// not a timing assertion).
func (c *consumer) waitPosition(run string, n int64) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := c.in.Position(context.Background(), run)
		if err != nil {
			c.t.Fatal(err)
		}
		if p == n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("run %s: position %d after a minute, want %d", run, p, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// enqueueRelayed enqueues n events to run while a relay runs beside, projecting them as they commit.
func enqueueRelayed(t testing.TB, rj *relayJournal, run string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	relay := outboxtest.NewRelay(t, rj.s, rj.j, run, outbox.WithPollInterval(5*time.Millisecond), outbox.WithBatchSize(7))
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	for range n {
		if _, err := rj.s.EnqueueEvent(ctx, run, journal.Builder(run, "unit", map[string]any{"cents": 100})); err != nil {
			t.Fatalf("EnqueueEvent: %v", err)
		}
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("relay: %v", err)
	}
}

// FollowFile applies what a running relay appends, and returns ctx.Err() when its context ends, with
// all it applied committed and its position stored at the file's end.
func TestFollowFileAppliesWhatARelayAppendsAndReturnsCtxErr(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 5) // before it starts: ApplyFile's part
	c := newConsumer(t, WithPollInterval(20*time.Millisecond))
	stop := c.follow(rj.path, record)
	enqueueRelayed(t, rj, "a", 200)
	c.waitPosition("a", 205)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowFile returned %v, want context.Canceled", err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 205})
	if p := c.position(rj.path); p.Offset != int64(len(readAllFile(t, rj.path))) {
		t.Fatalf("position at %d, the file is %d bytes", p.Offset, len(readAllFile(t, rj.path)))
	}
}

// With no file notifications (lost, overflowing, or none to be had) the poll finds every line.
func TestFollowFileWithPollingAloneLosesNoLine(t *testing.T) {
	followNotify = false
	defer func() { followNotify = true }()
	rj := newRelayJournal(t, journalPath(t))
	c := newConsumer(t, WithPollInterval(5*time.Millisecond))
	c.follow(rj.path, record)
	enqueueRelayed(t, rj, "a", 100)
	c.waitPosition("a", 100)
	wantApplied(t, c.applied(), map[string]int64{"a": 100})
}

// FollowFile waits for a file that does not exist yet, in a directory that does not exist yet either.
func TestFollowFileWaitsForAFileThatDoesNotExistYet(t *testing.T) {
	for _, dirLater := range []bool{false, true} {
		path := journalPath(t)
		if dirLater {
			path = filepath.Join(filepath.Dir(path), "later", "journal.jsonl")
		}
		c := newConsumer(t, WithPollInterval(10*time.Millisecond))
		c.follow(path, record)
		if dirLater {
			os.Mkdir(filepath.Dir(path), 0o755)
		}
		rj := newRelayJournal(t, path)
		rj.add("a", 3)
		c.waitPosition("a", 3)
	}
}

// A rotation while following: the old file is read to its end from the descriptor held, then the new
// one from its start; and after a restart the old file is found by its identity.
func TestFollowFileFollowsARotationByRename(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 3)
	c := newConsumer(t, WithPollInterval(10*time.Millisecond))
	stop := c.follow(rj.path, record)
	c.waitPosition("a", 3)
	rj.add("a", 2)
	rj.j.Close()
	os.Rename(rj.path, rj.path+".1")
	rj.open()
	rj.add("b", 4)
	c.waitPosition("a", 5)
	c.waitPosition("b", 4)
	stop()

	// Stopped with lines left in the file, rotated again while stopped.
	rj.add("b", 2)
	rj.j.Close()
	os.Rename(rj.path+".1", rj.path+".2")
	os.Rename(rj.path, rj.path+".1")
	rj.open()
	rj.add("c", 1)
	c.reopen()
	c.follow(rj.path, record)
	c.waitPosition("b", 6)
	c.waitPosition("c", 1)
	wantApplied(t, c.applied(), map[string]int64{"a": 5, "b": 6, "c": 1})
}

// A truncation while following (the journal cut and written again): read again from its start.
func TestFollowFileReadsATruncatedJournalAgainFromItsStart(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 4)
	c := newConsumer(t, WithPollInterval(10*time.Millisecond))
	c.follow(rj.path, record)
	c.waitPosition("a", 4)
	rj.j.Close()
	os.Truncate(rj.path, 0)
	rj.open()
	rj.add("b", 3)
	c.waitPosition("b", 3)
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 3})
}

// One inbox follows several files, each its own source with its own position.
func TestOneInboxFollowsSeveralFiles(t *testing.T) {
	c := newConsumer(t, WithPollInterval(10*time.Millisecond))
	var rjs []*relayJournal
	for i := range 3 {
		rj := newRelayJournal(t, journalPath(t))
		rjs = append(rjs, rj)
		c.follow(rj.path, record)
		rj.add(fmt.Sprint("r", i), 10+i)
	}
	for i := range 3 {
		c.waitPosition(fmt.Sprint("r", i), int64(10+i))
	}
	srcs, err := c.in.Sources(context.Background())
	if err != nil || len(srcs) != 3 {
		t.Fatalf("Sources: %+v, %v", srcs, err)
	}
	for i, rj := range rjs {
		if p := c.position(rj.path); p == nil || p.Offset != int64(len(readAllFile(t, rj.path))) {
			t.Fatalf("file %d: position %+v", i, p)
		}
	}
}

// Two calls on one file at once both move its one stored position: each finds it moved under it at
// times (ErrSourceMoved), reads it again and goes on; every line is applied once.
func TestTwoCallsOnOneFileApplyEachLineOnce(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 60)
	c := newConsumer(t, WithBatchLines(2))
	var wg sync.WaitGroup
	var applied atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
			if err != nil {
				t.Error(err)
			}
			applied.Add(int64(rep.Applied))
		}()
	}
	wg.Wait()
	if applied.Load() != 60 {
		t.Fatalf("applied %d in all, want 60", applied.Load())
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 60})
}

// A run parked by its handler: its later lines are skipped while it is quarantined; after Release
// the source reads the file again from its start and the run goes on, each line applied once. The
// follower notices the rewound position though no new line comes.
func TestAReleasedRunIsReadAgainFromTheStart(t *testing.T) {
	for _, follow := range []bool{false, true} {
		rj := newRelayJournal(t, journalPath(t))
		rj.add("a", 5)
		rj.add("b", 3)
		c := newConsumer(t, WithBatchLines(3), WithPollInterval(10*time.Millisecond))
		var refuse atomic.Bool
		refuse.Store(true)
		h := func(ctx context.Context, tx *sql.Tx, ev Event) error {
			if ev.RunID == "a" && ev.Seq == 3 && refuse.Load() {
				return fmt.Errorf("not now: %w", ErrQuarantine)
			}
			return record(ctx, tx, ev)
		}
		if follow {
			c.follow(rj.path, h)
			c.waitPosition("b", 3)
		} else if rep, err := c.in.ApplyFile(context.Background(), rj.path, h); err != nil || rep != (Report{Applied: 5, Quarantined: 3}) {
			t.Fatalf("%+v, %v", rep, err)
		}
		if q := c.quarantine("a"); q == nil || q.Reason != "handler" {
			t.Fatalf("follow %v: quarantine %+v", follow, q)
		}
		refuse.Store(false)
		if err := c.in.Release(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		if !follow {
			if rep, err := c.in.ApplyFile(context.Background(), rj.path, h); err != nil || rep != (Report{Applied: 3, Duplicates: 5}) {
				t.Fatalf("after Release: %+v, %v", rep, err)
			}
		}
		c.waitPosition("a", 5)
		wantApplied(t, c.applied(), map[string]int64{"a": 5, "b": 3})
	}
}

// A handler's error ends FollowFile with that error (not ctx's), the batches before it committed.
func TestFollowFileStopsAtAHandlerError(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 4)
	c := newConsumer(t, WithBatchLines(1))
	boom := errors.New("boom")
	err := c.in.FollowFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.Seq == 3 {
			return boom
		}
		return record(ctx, tx, ev)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("%v, want boom", err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 2})
}

// ApplyFile called again and again while a relay appends (a line may be half-written at any call's
// end): every line is applied once, none before its newline, none skipped.
func TestApplyFileWhileARelayAppendsAppliesEachLineOnce(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 1)
	c := newConsumer(t, WithBatchLines(5))
	done := make(chan struct{})
	go func() {
		defer close(done)
		enqueueRelayed(t, rj, "a", 150)
	}()
	total := 0
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
		if err != nil {
			t.Fatal(err)
		}
		total += rep.Applied
	}
	if total != 151 {
		t.Fatalf("applied %d in all, want 151", total)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 151})
}
