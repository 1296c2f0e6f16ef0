// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// fillJournal appends n batches of three lines of run r to j and returns the segments after.
func fillJournal(t *testing.T, j *Journal, r string, from int64, n int) int64 {
	t.Helper()
	for range n {
		mustAppend(t, j, r, runBatch(r, from, 3, strings.Repeat("w", 40)))
		from += 3
	}
	return from
}

func TestASegmentEveryReaderHasReadIsDeletedAndOneAReaderHasNotIsKept(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 20)
	segs := segmentsOf(t, dir)
	if len(segs) < 5 {
		t.Fatalf("only %d segments", len(segs))
	}
	// "a" has read the first three segments, "b" the first two and one byte short of the third.
	if err := SetReader(dir, "a", segs[3].base); err != nil {
		t.Fatal(err)
	}
	if err := SetReader(dir, "b", segs[2].base+segs[2].size-1); err != nil {
		t.Fatal(err)
	}
	rep, err := j.Trim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 2 || rep.Deleted[0].Position != segs[0].base || rep.Deleted[1].Position != segs[1].base ||
		rep.Held == nil || rep.Held.Position != segs[2].base || rep.Held.Reason != HeldUnread ||
		len(rep.Held.Readers) != 1 || rep.Held.Readers[0] != "b" || rep.First != segs[2].base || rep.UnderCap != 0 {
		t.Fatalf("report: %+v held %+v", rep, rep.Held)
	}
	for _, s := range segs[:2] {
		for _, name := range []string{segmentName(s.base), indexName(s.base)} {
			if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s is still there: %v", name, err)
			}
		}
	}
	// The journal goes on: appends, and reads back through the retained segments.
	fillJournal(t, j, "r", 61, 2)
	if err := j.Append(context.Background(), "r", runBatch("r", 58, 3, strings.Repeat("w", 40))); err != nil {
		t.Fatalf("a re-delivery of retained lines: %v", err)
	}
	if err := j.Append(context.Background(), "r", runBatch("r", 58, 3, strings.Repeat("v", 40))); !errors.Is(err, ErrPayloadConflict) {
		t.Fatalf("a conflicting re-delivery of retained lines: %v", err)
	}
	j.Close()
	j = openDir(t, dir)
	if last, err := j.LastSeq("r"); err != nil || last != 66 {
		t.Fatalf("last seq after a reopen: %d, %v", last, err)
	}
}

func TestAJournalWithoutRetentionOptionsDeletesNothingWhenItSeals(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 5)
	if err := SetReader(dir, "a", 1<<40); err != nil {
		t.Fatal(err)
	}
	n := len(segmentsOf(t, dir))
	fillJournal(t, j, "r", 16, 15)
	if got := segmentsOf(t, dir); got[0].base != 0 || len(got) <= n {
		t.Fatalf("segments: %v", got)
	}
}

func TestAJournalWithRetentionTrimsWhenItSeals(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500), WithKeep(0))
	if err := SetReader(dir, "a", 0); err != nil {
		t.Fatal(err)
	}
	fillJournal(t, j, "r", 1, 10)
	if got := segmentsOf(t, dir); got[0].base != 0 {
		t.Fatalf("segments a reader has not read were deleted: %v", got)
	}
	end := j.Stats().End
	if err := SetReader(dir, "a", end); err != nil {
		t.Fatal(err)
	}
	before := segmentsOf(t, dir)
	fillJournal(t, j, "r", 31, 5)
	after := segmentsOf(t, dir)
	if after[0].base != end {
		t.Fatalf("before %v, after %v: the segments the reader read were not deleted at the next seal", before, after)
	}
	if st := j.Stats(); st.First != after[0].base || st.DeletedSegments != int64(len(before)) || st.DeletedUnderCap != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTheKeepDurationHoldsASegmentEveryReaderHasRead(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	now := time.Now()
	clock := func() time.Time { return now }
	j := openDir(t, dir, WithSegmentSize(500), withClock(clock), WithKeep(time.Hour))
	fillJournal(t, j, "r", 1, 10)
	segs := segmentsOf(t, dir)
	rep, err := j.Trim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 || rep.Held == nil || rep.Held.Reason != HeldKeep || rep.Held.Position != 0 || rep.Held.Until.Before(now) {
		t.Fatalf("report %+v, held %+v", rep, rep.Held)
	}
	now = now.Add(2 * time.Hour)
	rep, err = j.Trim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != len(segs)-1 || rep.Held != nil || rep.Segments != 1 {
		t.Fatalf("report %+v, held %+v", rep, rep.Held)
	}
}

func TestTheCapDeletesUnreadSegmentsAndLogsTheReadersLeftBehind(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	j := openDir(t, dir, WithSegmentSize(500), WithMaxBytes(1200), WithLogger(log))
	if err := SetReader(dir, "stopped", 0); err != nil {
		t.Fatal(err)
	}
	fillJournal(t, j, "r", 1, 30)
	st := j.Stats()
	if st.Bytes > 1200 || st.DeletedUnderCap == 0 || st.DeletedUnderCap != st.DeletedSegments {
		t.Fatalf("stats: %+v", st)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "stopped") {
		t.Fatalf("log: %s", logs.String())
	}
	info, err := Retained(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.First != st.First || len(info.Runs) != 1 || info.Runs[0].RunID != "r" || info.Runs[0].LastSeq < 3 ||
		info.DeletedUnderCap != st.DeletedUnderCap {
		t.Fatalf("retained: %+v", info)
	}
	ds, err := Status(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Readers) != 1 || !ds.Readers[0].Lost || ds.Readers[0].LagBytes != ds.End {
		t.Fatalf("status: %+v", ds)
	}
}

func TestACapSmallerThanOneSegmentKeepsOnlyTheLastSegment(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 10)
	j.Close()
	rep, err := Trim(context.Background(), dir, WithMaxBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Segments != 1 || !rep.OverCap || rep.Held != nil {
		t.Fatalf("report %+v", rep)
	}
	j = openDir(t, dir, WithSegmentSize(500))
	if last, err := j.LastSeq("r"); err != nil || last != 30 {
		t.Fatalf("last seq %d, %v", last, err)
	}
	fillJournal(t, j, "r", 31, 3)
}

func TestRetentionNeverDeletesASegmentAReaderHoldsOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 20)
	segs := segmentsOf(t, dir)
	f, err := os.Open(filepath.Join(dir, segmentName(segs[2].base)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	rep, err := j.Trim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 2 || rep.Held == nil || rep.Held.Reason != HeldOpen || rep.Held.Position != segs[2].base {
		t.Fatalf("report %+v held %+v", rep, rep.Held)
	}
	if got := segmentsOf(t, dir); got[0].base != segs[2].base {
		t.Fatalf("segments %v", got)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if rep, err := j.Trim(context.Background()); err != nil || rep.Segments != 1 {
		t.Fatalf("once the reader let go: %+v, %v", rep, err)
	}
}

func TestARunWhoseLinesRetentionDeletedKeepsItsLastSeqAndTakesTheirReDelivery(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "old", 1, 10)
	fillJournal(t, j, "r", 1, 10)
	if _, err := Trim(context.Background(), dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("an offline trim beside an open journal: %v", err)
	}
	rep, err := j.Trim(context.Background())
	if err != nil || rep.Segments != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	for _, reopen := range []bool{false, true} {
		if reopen {
			j.Close()
			j = openDir(t, dir, WithSegmentSize(500))
		}
		if last, err := j.LastSeq("old"); err != nil || last != 30 {
			t.Fatalf("reopened %v: the last seq of a run retention deleted: %d, %v", reopen, last, err)
		}
		// The relay re-sends what it had not recorded: nothing is left to compare it with.
		if err := j.Append(context.Background(), "old", runBatch("old", 28, 3, "other bytes")); err != nil {
			t.Fatalf("reopened %v: a re-delivery of deleted lines: %v", reopen, err)
		}
		if err := j.Append(context.Background(), "old", runBatch("old", 40, 3, "x")); !errors.Is(err, ErrStreamGap) {
			t.Fatalf("reopened %v: a gap after deleted lines: %v", reopen, err)
		}
	}
}

func TestSegmentsDeletedByHandAreNoticedAtOpen(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"the first", "the first after a trim", "the last", "the last with its index"} {
		dir := filepath.Join(t.TempDir(), "j")
		j := openDir(t, dir, WithSegmentSize(500))
		fillJournal(t, j, "r", 1, 20)
		if which == "the first after a trim" {
			if err := SetReader(dir, "a", segmentsOf(t, dir)[2].base); err != nil {
				t.Fatal(err)
			}
			if _, err := j.Trim(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
		segs := segmentsOf(t, dir)
		gone := []string{segmentName(segs[0].base), indexName(segs[0].base)}
		if strings.HasPrefix(which, "the last") {
			gone = []string{segmentName(segs[len(segs)-1].base)}
			if which == "the last with its index" {
				gone = append(gone, indexName(segs[len(segs)-2].base))
			}
		}
		for _, name := range gone {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		if j, err := Open(dir); !errors.Is(err, ErrModified) {
			if j != nil {
				j.Close()
			}
			t.Errorf("%s segment deleted by hand: Open %v, want ErrModified", which, err)
		}
		if _, err := Trim(context.Background(), dir); !errors.Is(err, ErrModified) {
			t.Errorf("%s segment deleted by hand: Trim %v, want ErrModified", which, err)
		}
		if _, err := Retained(dir); !errors.Is(err, ErrModified) {
			t.Errorf("%s segment deleted by hand: Retained %v, want ErrModified", which, err)
		}
		if _, err := Status(context.Background(), dir); !errors.Is(err, ErrModified) {
			t.Errorf("%s segment deleted by hand: Status %v, want ErrModified", which, err)
		}
	}
}

func TestATornRetentionRecordIsAnErrorNamingIt(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 10)
	j.Close()
	path := filepath.Join(dir, stateName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if j, err := Open(dir); !errors.Is(err, ErrModified) || !strings.Contains(err.Error(), path) {
		if j != nil {
			j.Close()
		}
		t.Fatalf("Open with a torn record: %v", err)
	}
	if _, err := Retained(dir); !errors.Is(err, ErrModified) {
		t.Fatalf("Retained with a torn record: %v", err)
	}
}

func TestTrimWithACancelledContextDeletesNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := segmentsOf(t, dir)
	if _, err := j.Trim(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Trim: %v", err)
	}
	j.Close()
	if _, err := Trim(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("offline Trim: %v", err)
	}
	if after := segmentsOf(t, dir); len(after) != len(before) {
		t.Fatalf("before %v after %v", before, after)
	}
}

func TestAReaderPositionPastTheJournalsEndHoldsEverySegment(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 10)
	if err := SetReader(dir, "elsewhere", 1<<40); err != nil {
		t.Fatal(err)
	}
	rep, err := j.Trim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 0 || rep.Held == nil || rep.Held.Reason != HeldAhead || rep.Held.Readers[0] != "elsewhere" {
		t.Fatalf("report %+v held %+v", rep, rep.Held)
	}
	ds, err := Status(context.Background(), dir)
	if err != nil || !ds.Readers[0].Ahead || len(ds.WouldDelete) != 0 {
		t.Fatalf("status %+v, %v", ds, err)
	}
}

func TestADirectoryWithAReaderFileButNoSegmentHasNothingToTrimAndOpens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := SetReader(dir, "early", 0); err != nil {
		t.Fatal(err)
	}
	rep, err := Trim(context.Background(), dir, WithMaxBytes(1))
	if err != nil || len(rep.Deleted) != 0 {
		t.Fatalf("%+v, %v", rep, err)
	}
	ds, err := Status(context.Background(), dir)
	if err != nil || ds.Segments != 0 || len(ds.Readers) != 1 {
		t.Fatalf("%+v, %v", ds, err)
	}
	info, err := Retained(dir)
	if err != nil || info.First != 0 {
		t.Fatalf("%+v, %v", info, err)
	}
	j := openDir(t, dir)
	mustAppend(t, j, "r", runBatch("r", 1, 3, "x"))
}

func TestRetentionsRecordStaysSmallWhateverTheRunsItDeleted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(4000), WithKeep(0))
	for i := range 1500 {
		mustAppend(t, j, fmt.Sprintf("run-%04d", i), runBatch(fmt.Sprintf("run-%04d", i), 1, 1, "x"))
	}
	info, err := Retained(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Runs) > maxStateRuns || info.RunsDropped == 0 || int64(len(info.Runs))+info.RunsDropped < 1400 {
		t.Fatalf("%d runs listed, %d dropped", len(info.Runs), info.RunsDropped)
	}
	if last := info.Runs[len(info.Runs)-1]; last.LastSeq != 1 || !strings.HasPrefix(last.RunID, "run-1") {
		t.Fatalf("the last run recorded: %+v", last)
	}
	if st, _ := os.Stat(filepath.Join(dir, stateName)); st.Size() > 64<<10 {
		t.Fatalf("the record is %d bytes", st.Size())
	}
}

// A trim stopped after it recorded its deletes and before it unlinked them leaves segments the
// record counts as deleted; the next trim deletes them without counting them again.
func TestSegmentsRecordedAsDeletedBeforeACrashAreDeletedOnceAndCountedOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, err := Open(dir, WithSegmentSize(500))
	if err != nil {
		t.Fatal(err)
	}
	fillJournal(t, j, "r", 1, 10)
	n := len(segmentsOf(t, dir)) - 1
	faultpoint.Set(func(p string) {
		if p == faultTrimRecorded {
			panic(p)
		}
	})
	func() {
		defer func() { recover() }()
		j.Trim(context.Background())
	}()
	faultpoint.Set(nil)
	j.Close()
	if got := len(segmentsOf(t, dir)) - 1; got != n {
		t.Fatalf("%d sealed segments before the stop, %d after", n, got)
	}
	j = openDir(t, dir, WithSegmentSize(500))
	if last, err := j.LastSeq("r"); err != nil || last != 30 {
		t.Fatalf("last seq %d, %v", last, err)
	}
	rep, err := j.Trim(context.Background())
	if err != nil || len(rep.Deleted) != n || rep.Deleted[0].Reason != ReasonRecorded {
		t.Fatalf("%+v, %v", rep, err)
	}
	if st := j.Stats(); st.DeletedSegments != int64(n) || st.Segments != 1 {
		t.Fatalf("stats %+v, %d segments deleted", st, n)
	}
	fillJournal(t, j, "r", 31, 3)
}

func TestANegativeKeepOrANonPositiveCapIsRefusedAndCreatesNothing(t *testing.T) {
	t.Parallel()
	for _, opt := range []Option{WithKeep(-time.Second), WithMaxBytes(0), WithMaxBytes(-1)} {
		dir := filepath.Join(t.TempDir(), "j")
		if j, err := Open(dir, opt); err == nil {
			j.Close()
			t.Errorf("Open took a bad retention option")
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused Open left %s: %v", dir, err)
		}
		if _, err := Status(context.Background(), t.TempDir(), opt); err == nil {
			t.Errorf("Status took a bad retention option")
		}
	}
	if _, err := Retained(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Retained of a missing directory: %v", err)
	}
}

func TestRetentionIsSilentWithoutALogger(t *testing.T) {
	var logs bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500), WithMaxBytes(1000))
	if err := SetReader(dir, "stopped", 0); err != nil {
		t.Fatal(err)
	}
	fillJournal(t, j, "r", 1, 20)
	if st := j.Stats(); st.DeletedUnderCap == 0 {
		t.Fatalf("the cap deleted nothing: %+v", st)
	}
	if logs.Len() != 0 {
		t.Fatalf("retention logged without a logger: %s", logs.String())
	}
}

func TestAJournalWhoseSegmentsWereDeletedByHandOpensOnlyOnceTheLossIsAccepted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 20)
	if _, err := AcceptMissing(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("AcceptMissing beside an open journal: %v", err)
	}
	j.Close()
	segs := segmentsOf(t, dir)
	for _, name := range []string{segmentName(segs[0].base), indexName(segs[0].base), segmentName(segs[len(segs)-1].base)} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if j, err := Open(dir); !errors.Is(err, ErrModified) {
		if j != nil {
			j.Close()
		}
		t.Fatalf("Open: %v", err)
	}
	m, err := AcceptMissing(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.FrontFrom != 0 || m.FrontTo != segs[1].base || m.TailFrom != segs[len(segs)-2].base || m.TailTo != segs[len(segs)-1].base {
		t.Fatalf("accepted %+v of %v", m, segs)
	}
	j = openDir(t, dir, WithSegmentSize(500))
	last, err := j.LastSeq("r")
	if err != nil {
		t.Fatal(err)
	}
	fillJournal(t, j, "r", last+1, 3)
}

func TestATornReaderFileHoldsEverySegmentButWhatTheCapTakesAndIsTheTrimsError(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 20)
	torn := filepath.Join(dir, "torn.reader")
	if err := os.WriteFile(torn, []byte("outbox journal reader 1 torn 12"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := len(segmentsOf(t, dir))
	rep, err := j.Trim(context.Background())
	if err == nil || !strings.Contains(err.Error(), torn) || len(rep.Deleted) != 0 || rep.Held == nil || rep.Held.Reason != HeldBadFile {
		t.Fatalf("%+v, %v", rep, err)
	}
	if got := len(segmentsOf(t, dir)); got != n {
		t.Fatalf("%d segments, %d before", got, n)
	}
	j.Close()
	rep, err = Trim(context.Background(), dir, WithMaxBytes(1200))
	if err == nil || !strings.Contains(err.Error(), torn) || rep.UnderCap == 0 || rep.LeftBehind[0] != "torn" || rep.OverCap {
		t.Fatalf("under the cap: %+v, %v", rep, err)
	}
}

func TestTheCapNeverDeletesASegmentAReaderHoldsOpen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(500))
	fillJournal(t, j, "r", 1, 20)
	j.Close()
	if err := SetReader(dir, "slow", 0); err != nil {
		t.Fatal(err)
	}
	segs := segmentsOf(t, dir)
	f, err := os.Open(filepath.Join(dir, segmentName(segs[0].base)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	rep, err := Trim(context.Background(), dir, WithMaxBytes(1))
	if err != nil || len(rep.Deleted) != 0 || rep.Held == nil || rep.Held.Reason != HeldOpen || !rep.OverCap {
		t.Fatalf("%+v, %v", rep, err)
	}
	if got := segmentsOf(t, dir); len(got) != len(segs) {
		t.Fatalf("segments %v, before %v", got, segs)
	}
}
