// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
)

// followJournal runs FollowJournal on dir until the returned stop is called, which returns what
// FollowJournal returned.
func (c *consumer) followJournal(dir string, h Handler) (stop func() error) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := c.in.FollowJournal(ctx, dir, h)
		if ctx.Err() == nil {
			c.t.Errorf("FollowJournal returned before it was stopped: %v", err)
		}
		done <- err
	}()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				c.t.Fatal("FollowJournal did not return in a minute after its context ended")
			}
		})
		return err
	}
	c.t.Cleanup(func() { stop() })
	return stop
}

// linesIn counts the lines of the segments from base on.
func (sj *segJournal) linesFrom(base int64) int {
	sj.t.Helper()
	n := 0
	for _, b := range sj.segments() {
		if b >= base {
			data, err := os.ReadFile(filepath.Join(sj.dir, segmentFileName(b)))
			if err != nil {
				sj.t.Fatal(err)
			}
			n += bytes.Count(data, []byte{'\n'})
		}
	}
	return n
}

func TestAReleaseRewindsAJournalSourceOnlyToTheSegmentTheSealIndexesSayCanHoldTheRunsNextLine(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 500)
	sj.add("a", 30, 3)
	sj.add("b", 10, 2)
	sj.add("a", 4, 2)
	c := newConsumer(t)
	ctx := context.Background()
	refuseB3 := func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.RunID == "b" && ev.Seq == 3 {
			return fmt.Errorf("not now: %w", ErrQuarantine)
		}
		return record(ctx, tx, ev)
	}
	if _, err := c.in.ApplyJournal(ctx, sj.dir, refuseB3); err != nil {
		t.Fatal(err)
	}
	if p := runMark(t, c.in, "b"); p != 2 {
		t.Fatalf("run b at %d, want 2 (quarantined at 3)", p)
	}
	at, err := journal.LocateRun(ctx, sj.dir, "b", 3)
	if err != nil {
		t.Fatal(err)
	}
	if at == 0 {
		t.Fatal("b's line 3 is in the first segment: the test needs it later")
	}
	if err := c.in.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got := readerAt(t, sj.dir, c.in.readerName()); got != at {
		t.Fatalf("after the release the reader is registered at %d, want %d, where b's next line can be", got, at)
	}
	rep, err := c.in.ApplyJournal(ctx, sj.dir, record)
	if err != nil {
		t.Fatal(err)
	}
	// Every line from the located segment on is read again; none before it.
	if want := sj.linesFrom(at) - 8; rep.Applied != 8 || rep.Duplicates != want {
		t.Fatalf("after the release: %+v; want 8 applied and %d duplicates (the lines from byte %d on)", rep, want, at)
	}
	if got := c.applied(); got["a"] != 34 || got["b"] != 10 {
		t.Fatalf("applied %v", got)
	}
	if got, end := readerAt(t, sj.dir, c.in.readerName()), sj.end(); got != end {
		t.Fatalf("registered at %d, the journal ends at %d", got, end)
	}
}

// runMark is the run's high-water mark.
func runMark(t testing.TB, in *Inbox, run string) int64 {
	t.Helper()
	p, err := in.Position(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// trim removes the segments (and their indexes) below base, as retention would.
func (sj *segJournal) trim(base int64) {
	sj.t.Helper()
	for _, b := range sj.segments() {
		if b < base {
			os.Remove(filepath.Join(sj.dir, segmentFileName(b)))
			os.Remove(filepath.Join(sj.dir, fmt.Sprintf("%020d.idx", b)))
		}
	}
}

func TestAReaderWhosePositionIsBelowTheFirstRetainedSegmentStopsWithTheGapAndTheRunsItWillNotGet(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 500)
	sj.add("a", 5, 5)
	c := newConsumer(t, WithOperator("ops"))
	ctx := context.Background()
	if _, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil {
		t.Fatal(err)
	}
	before := c.journalPosition(sj.dir).Position
	sj.add("a", 20, 5)
	sj.add("b", 7, 7)
	segs := sj.segments()
	first := segs[len(segs)-2]
	sj.trim(first)
	_, err := c.in.ApplyJournal(ctx, sj.dir, record)
	var gap *JournalGapError
	if !errors.Is(err, ErrRetentionGap) || !errors.As(err, &gap) {
		t.Fatalf("ApplyJournal after the trim: %v, want a *JournalGapError", err)
	}
	if gap.Position != before || gap.First != first {
		t.Fatalf("the gap names %d to %d, want %d to %d", gap.Position, gap.First, before, first)
	}
	if len(gap.RunsLost) != 1 || gap.RunsLost[0].RunID != "a" || gap.RunsLost[0].FirstSeq != 6 {
		t.Fatalf("runs lost %+v, want run a from seq 6", gap.RunsLost)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(first)) {
		t.Fatalf("the message does not name the first retained position: %v", err)
	}
	if got := c.applied(); got["a"] != 5 || got["b"] != 0 {
		t.Fatalf("the gap applied something: %v", got)
	}
	// The operator's decision, recorded; then the runs that lost lines are quarantined, not skipped.
	if err := c.in.AcceptRetentionGap(ctx, sj.dir, "trimmed under the cap"); err != nil {
		t.Fatal(err)
	}
	gaps, err := c.in.AcceptedGaps(ctx)
	if err != nil || len(gaps) != 1 || gaps[0].FirstSeq != before || gaps[0].LastSeq != first-1 || gaps[0].AcceptedBy != "ops" ||
		gaps[0].Reason != "trimmed under the cap" || !strings.HasPrefix(gaps[0].RunID, journalSourcePrefix) {
		t.Fatalf("accepted gaps %+v, %v", gaps, err)
	}
	if _, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil {
		t.Fatal(err)
	}
	qs, err := c.in.Quarantined(ctx)
	if err != nil || len(qs) != 1 || qs[0].RunID != "a" || qs[0].Reason != "gap" {
		t.Fatalf("quarantined %+v, %v: run a lost lines and must be parked", qs, err)
	}
	if got := c.applied(); got["b"] != 7 {
		t.Fatalf("applied %v: run b, whole in the retained segments, goes on", got)
	}
	if err := c.in.AcceptRetentionGap(ctx, sj.dir, "again"); err == nil {
		t.Fatal("a second acceptance with no gap was taken")
	}
}

func TestANewReaderOfATrimmedJournalStopsWithTheGapUnlessTheOperatorAcceptsIt(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 500)
	sj.add("a", 20, 4)
	segs := sj.segments()
	sj.trim(segs[1])
	c := newConsumer(t)
	ctx := context.Background()
	_, err := c.in.ApplyJournal(ctx, sj.dir, record)
	var gap *JournalGapError
	if !errors.As(err, &gap) || gap.Position != -1 || gap.First != segs[1] {
		t.Fatalf("a new reader of a trimmed journal: %v", err)
	}
	if readerAt(t, sj.dir, c.in.readerName()) != -1 {
		t.Fatal("a reader stopped by a gap registered")
	}
	if err := c.in.FollowJournal(ctx, sj.dir, record); !errors.Is(err, ErrRetentionGap) {
		t.Fatalf("FollowJournal: %v, want the gap", err)
	}
	if got := c.applied(); len(got) != 0 {
		t.Fatalf("applied %v", got)
	}
	if err := c.in.AcceptRetentionGap(ctx, sj.dir, "a new consumer starts at the retained journal"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil {
		t.Fatal(err)
	}
	if qs, _ := c.in.Quarantined(ctx); len(qs) != 1 {
		t.Fatalf("run a begins past seq 1 in the retained journal: quarantined %+v", qs)
	}
}

func TestFollowJournalWakesOnANewSegmentWithoutThePoll(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 300)
	c := newConsumer(t, WithPollInterval(time.Hour))
	sj.add("a", 1, 1)
	c.followJournal(sj.dir, record)
	c.waitPosition("a", 1)
	n := len(sj.segments())
	for i := int64(2); i <= 12; i++ {
		sj.add("a", 1, 1)
		c.waitPosition("a", i)
	}
	if len(sj.segments()) < n+2 {
		t.Fatalf("the journal rolled %d times: the test wants rolls", len(sj.segments())-n)
	}
}

func TestApplyJournalRefusesHostileInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("a directory that is a file", func(t *testing.T) {
		c := newConsumer(t)
		file := filepath.Join(t.TempDir(), "journal.jsonl")
		os.WriteFile(file, []byte(`{"engine_run_id":"a","seq":1}`+"\n"), 0o644)
		if _, err := c.in.ApplyJournal(ctx, file, record); !errors.Is(err, journal.ErrNotJournal) {
			t.Fatalf("%v, want ErrNotJournal", err)
		}
	})
	t.Run("a directory that does not exist", func(t *testing.T) {
		c := newConsumer(t)
		if _, err := c.in.ApplyJournal(ctx, filepath.Join(t.TempDir(), "none"), record); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%v, want ErrNotExist", err)
		}
	})
	t.Run("a reader name with control bytes", func(t *testing.T) {
		for _, name := range []string{"a\nb", "tab\there", "", ".hidden", "../up", strings.Repeat("x", 65), "nul\x00"} {
			if _, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"), WithReaderName(name)); !errors.Is(err, journal.ErrReaderName) {
				t.Errorf("WithReaderName(%q): %v, want ErrReaderName", name, err)
			}
		}
	})
	t.Run("a segment replaced by another program", func(t *testing.T) {
		sj := newSegJournal(t, 500)
		sj.add("a", 12, 3)
		c := newConsumer(t)
		if _, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil {
			t.Fatal(err)
		}
		jp := c.journalPosition(sj.dir)
		seg := filepath.Join(sj.dir, segmentFileName(jp.Segment))
		b, _ := os.ReadFile(seg)
		other := bytes.ReplaceAll(b, []byte(`"cents":100`), []byte(`"cents":999`))
		os.WriteFile(seg, other, 0o644)
		if _, err := c.in.ApplyJournal(ctx, sj.dir, record); !errors.Is(err, ErrJournalReplaced) {
			t.Fatalf("%v, want ErrJournalReplaced", err)
		}
		if got := c.applied(); got["a"] != 12 {
			t.Fatalf("applied %v", got)
		}
	})
	t.Run("a journal removed and another started in its place", func(t *testing.T) {
		sj := newSegJournal(t, 500)
		sj.add("a", 9, 3)
		c := newConsumer(t)
		if _, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil {
			t.Fatal(err)
		}
		sj.j.Close()
		os.RemoveAll(sj.dir)
		j, err := journal.Open(sj.dir, journal.WithSegmentSize(500))
		if err != nil {
			t.Fatal(err)
		}
		sj.j, sj.seq = j, map[string]int64{}
		sj.add("zz", 30, 3) // other lines, and more of them: the old position lands inside one
		if _, err := c.in.ApplyJournal(ctx, sj.dir, record); !errors.Is(err, ErrJournalReplaced) {
			t.Fatalf("%v, want ErrJournalReplaced", err)
		}
		if err := c.in.ForgetJournal(ctx, sj.dir); err != nil {
			t.Fatal(err)
		}
		if _, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil {
			t.Fatal(err)
		}
		if got := c.applied(); got["zz"] != 30 {
			t.Fatalf("applied %v", got)
		}
	})
}

func TestAJournalReadersRegistrationNeverRunsAheadOfItsDatabase(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 400)
	sj.add("a", 30, 2)
	var c *consumer
	checks := 0
	c = newConsumer(t, WithBatchLines(4), WithBatchHook(func(source string, _ Report) {
		// Called after each commit: the registry holds the position before it, never the new one.
		stored := c.journalPosition(sj.dir).Position
		if at := readerAt(t, sj.dir, c.in.readerName()); at > stored || at < 0 {
			t.Errorf("registered at %d with %d committed", at, stored)
		}
		checks++
	}))
	if _, err := c.in.ApplyJournal(context.Background(), sj.dir, record); err != nil {
		t.Fatal(err)
	}
	if checks < 5 {
		t.Fatalf("%d batches", checks)
	}
}

func TestTheDefaultReaderNameIsTheSameAcrossRestartsAndDiffersBetweenTwoInboxes(t *testing.T) {
	t.Parallel()
	a := newConsumer(t)
	name := a.in.readerName()
	a.reopen()
	if a.in.readerName() != name {
		t.Fatalf("%q, then %q after a restart", name, a.in.readerName())
	}
	b := newConsumer(t) // the same file name in another directory
	if b.in.readerName() == name {
		t.Fatalf("two inboxes share the reader name %q", name)
	}
	for _, n := range []string{name, b.in.readerName(), defaultReaderName("/x/.\n odd name é.db")} {
		if err := checkReaderName(n); err != nil {
			t.Errorf("a default name the registry refuses: %v", err)
		}
	}
}

func TestFollowJournalWaitsForAJournalDirectoryThatDoesNotExistYet(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "journal")
	c := newConsumer(t)
	c.followJournal(dir, record)
	j, err := journal.Open(dir, journal.WithSegmentSize(300))
	if err != nil {
		t.Fatal(err)
	}
	sj := &segJournal{t: t, dir: dir, j: j, seq: map[string]int64{}}
	t.Cleanup(func() { sj.j.Close() })
	sj.add("a", 9, 2)
	c.waitPosition("a", 9)
}

func TestASealedSegmentWhoseLastLineLostItsNewlineStopsTheReader(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 300)
	sj.add("a", 15, 2)
	segs := sj.segments()
	path := filepath.Join(sj.dir, segmentFileName(segs[1]))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = ' ' // the same size, so the names still follow on
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t)
	// A hang is the failure this guards against: the deadline only ends the test, it is not measured.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.in.ApplyJournal(ctx, sj.dir, record); !errors.Is(err, journal.ErrModified) {
		t.Fatalf("%v, want journal.ErrModified", err)
	}
	if err := c.in.FollowJournal(ctx, sj.dir, record); !errors.Is(err, journal.ErrModified) {
		t.Fatalf("FollowJournal: %v, want journal.ErrModified", err)
	}
}
