// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
)

// followJournalSeeing starts FollowJournal on sj with the record handler, sending each seq it sees
// to the channel it returns; stop ends it and returns its error.
func followJournalSeeing(t *testing.T, c *consumer, dir string, h Handler) (seen chan int64, stop func() error) {
	t.Helper()
	seen = make(chan int64, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.in.FollowJournal(ctx, dir, func(ctx context.Context, tx *sql.Tx, ev Event) error {
			if err := h(ctx, tx, ev); err != nil {
				return err
			}
			seen <- ev.Seq
			return nil
		})
	}()
	t.Cleanup(cancel)
	return seen, func() error {
		cancel()
		return <-done
	}
}

// waitSeq waits until the handler has seen seq. A hang is the failure it guards against: the bound
// only ends the test, it is not measured.
func waitSeq(t *testing.T, seen chan int64, seq int64, why string) {
	t.Helper()
	bound := time.After(time.Minute)
	for {
		select {
		case s := <-seen:
			if s >= seq {
				return
			}
		case <-bound:
			t.Fatalf("line %d not applied in a minute: %s", seq, why)
		}
	}
}

// Not parallel: it sets the package's registration hook and interval.
func TestALineAppendedWhileARegistrationIsBeingWrittenIsAppliedWithoutWaitingForIt(t *testing.T) {
	sj := newSegJournal(t, 1<<20)
	sj.add("a", 1, 1)
	c := newConsumer(t)
	registerEvery = 0 // every commit registers
	defer func() { registerEvery = 250 * time.Millisecond }()
	// The start's registration is at byte 0: the first one after a commit is held.
	held, release := holdJournalRegistration(t, sj.dir, func(pos int64) bool { return pos > 0 })

	seen, stop := followJournalSeeing(t, c, sj.dir, record)
	waitSeq(t, seen, 1, "the first line")
	var at int64
	select {
	case at = <-held:
	case <-time.After(time.Minute):
		t.Fatal("no registration after the first line's commit")
	}

	// The registration of line 1's position is in progress, and stays so: line 2 is applied all the same.
	sj.add("a", 1, 1)
	waitSeq(t, seen, 2, "it waited for the registration in progress")
	c.waitPosition("a", 2)
	if got := readerAt(t, sj.dir, c.in.readerName()); got >= at {
		t.Fatalf("the held registration of byte %d was written (the reader file says %d)", at, got)
	}

	release()
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got, end := readerAt(t, sj.dir, c.in.readerName()), c.journalPosition(sj.dir).Position; got != end {
		t.Fatalf("after the follower returned the reader file says byte %d, the database %d", got, end)
	}
}

// Not parallel: it sets the package's registration hooks.
func TestAFollowJournalReturnsOnlyOnceItsLastRegistrationIsWritten(t *testing.T) {
	sj := newSegJournal(t, 1<<20)
	c := newConsumer(t)
	registerEvery = time.Hour // only the start and the end register
	defer func() { registerEvery = 250 * time.Millisecond }()
	var wrote atomic.Int64
	wrote.Store(-1)
	afterJournalRegister = func(dir string, pos int64) {
		if dir == sj.dir {
			wrote.Store(pos)
		}
	}
	defer func() { afterJournalRegister = nil }()

	sj.add("a", 5, 1)
	end := sj.end()
	held, release := holdJournalRegistration(t, sj.dir, func(pos int64) bool { return pos == end })
	_, stop := followJournalSeeing(t, c, sj.dir, record)
	c.waitPosition("a", 5)

	returned := make(chan error, 1)
	go func() { returned <- stop() }()
	select {
	case <-held:
	case err := <-returned:
		t.Fatalf("FollowJournal returned (%v) before its last registration was written", err)
	}
	select {
	case err := <-returned:
		t.Fatalf("FollowJournal returned (%v) while its last registration was being written", err)
	default:
	}
	release()
	if err := <-returned; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := wrote.Load(); got != end {
		t.Fatalf("when FollowJournal returned, the last registration written was byte %d, want %d", got, end)
	}
	if got := readerAt(t, sj.dir, c.in.readerName()); got != end {
		t.Fatalf("after FollowJournal returned the reader file says byte %d, want %d", got, end)
	}
}

// Not parallel: it sets the package's registration hooks and interval.
func TestARegistrationInProgressWhenAReleaseRewindsTheSourceIsDroppedNotWrittenAheadOfTheDatabase(t *testing.T) {
	ctx := context.Background()
	sj := newSegJournal(t, 500)
	sj.add("a", 30, 3)
	sj.add("b", 10, 2)
	sj.add("a", 4, 2)
	end := sj.end()
	c := newConsumer(t)
	registerEvery = 0 // every commit registers
	defer func() { registerEvery = 250 * time.Millisecond }()

	// Every registration written: at or behind the stored position, and while the source is rewound
	// (no position stored since the Release), at or behind the segment that can hold b's next line.
	var rewoundAt atomic.Int64
	rewoundAt.Store(-1)
	name := journalSourcePrefix + sj.dir
	afterJournalRegister = func(dir string, pos int64) {
		if dir != sj.dir {
			return
		}
		stored, err := c.in.SourcePosition(ctx, name)
		if err != nil {
			t.Error(err)
			return
		}
		if stored == nil {
			if at := rewoundAt.Load(); at >= 0 && pos > at {
				t.Errorf("registered byte %d while the source is rewound to read again from byte %d", pos, at)
			}
			return
		}
		jp, err := ParseJournalPosition(stored)
		if err != nil {
			t.Error(err)
			return
		}
		if pos > jp.Position {
			t.Errorf("registered byte %d while the database holds byte %d", pos, jp.Position)
		}
	}
	defer func() { afterJournalRegister = nil }()

	var refused atomic.Bool
	refuseB3Once := func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.RunID == "b" && ev.Seq == 3 && refused.CompareAndSwap(false, true) {
			return fmt.Errorf("not now: %w", ErrQuarantine)
		}
		return record(ctx, tx, ev)
	}
	held, release := holdJournalRegistration(t, sj.dir, func(pos int64) bool { return pos == end })
	_, stop := followJournalSeeing(t, c, sj.dir, refuseB3Once)
	select {
	case <-held: // the journal's end is committed, and its registration in progress
	case <-time.After(time.Minute):
		t.Fatal("no registration of the journal's end")
	}
	if p := runMark(t, c.in, "b"); p != 2 {
		t.Fatalf("run b at %d, want 2 (quarantined at 3)", p)
	}

	at, err := journal.LocateRun(ctx, sj.dir, "b", 3)
	if err != nil {
		t.Fatal(err)
	}
	if at == 0 || at >= end {
		t.Fatalf("b's line 3 is in the segment at byte %d of %d: the test needs it in a middle one", at, end)
	}
	rewoundAt.Store(at)
	if err := c.in.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got := readerAt(t, sj.dir, c.in.readerName()); got > at {
		t.Fatalf("after the release the reader is registered at %d, want at most %d", got, at)
	}
	release() // the held registration of the end now comes after the rewind

	c.waitPosition("b", 10)
	for bound := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		stored, err := c.in.SourcePosition(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if stored != nil {
			if jp, err := ParseJournalPosition(stored); err == nil && jp.Position == end {
				break
			}
		}
		if time.Now().After(bound) {
			t.Fatal("the follower did not read to the journal's end again in a minute")
		}
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := c.applied(); got["a"] != 34 || got["b"] != 10 {
		t.Fatalf("applied %v", got)
	}
	if got := readerAt(t, sj.dir, c.in.readerName()); got != end {
		t.Fatalf("after the follower returned the reader file says byte %d, the journal ends at %d", got, end)
	}
}

// Not parallel: it sets the package's registration interval.
func TestARegistrationThatFailsBesideTheReadingStopsTheFollowerWithWhatItAppliedCommitted(t *testing.T) {
	sj := newSegJournal(t, 1<<20)
	sj.add("a", 1, 1)
	c := newConsumer(t)
	registerEvery = 0 // every commit registers
	defer func() { registerEvery = 250 * time.Millisecond }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.in.FollowJournal(ctx, sj.dir, record) }()
	c.waitPosition("a", 1)

	// A directory where the reader file is: every write of it fails from now on.
	if err := inTheWay(c, sj.dir); err != nil {
		t.Fatal(err)
	}
	sj.add("a", 1, 1)
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the follower went on for a minute with its registration failing")
	}
	if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "register reader") {
		t.Fatalf("FollowJournal: %v, want the registration's failure", err)
	}
	// What it applied is committed, with its position.
	n := runMark(t, c.in, "a")
	if got := c.applied()["a"]; got != n || n < 1 {
		t.Fatalf("%d lines applied with the mark at %d", got, n)
	}
}
