// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// sinceCall is one listing a relay's book check asked of the journal.
type sinceCall struct {
	marked bool // the relay gave the book's mark (false: it asked for every run)
	runs   []string
	err    error
}

// sinceRecorder is the journal, noting each listing the relay asks of it.
type sinceRecorder struct {
	*journal.Journal
	calls []sinceCall
}

func (r *sinceRecorder) SinkRunsSince(ctx context.Context, mark []byte) ([]outbox.SinkRun, []byte, error) {
	runs, end, err := r.Journal.SinkRunsSince(ctx, mark)
	c := sinceCall{marked: mark != nil, err: err}
	for _, run := range runs {
		c.runs = append(c.runs, run.RunID)
	}
	r.calls = append(r.calls, c)
	return runs, end, err
}

// startChecked opens the book and the journal as life does and makes the relay's first call, noting
// what its book check listed.
func startChecked(t *testing.T, dbPath, dir, run string) (*sinceRecorder, error) {
	t.Helper()
	ctx := outboxtest.Patient(t)
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.Open(dir, journal.WithSegmentSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rec := &sinceRecorder{Journal: j}
	relay, err := outbox.NewRelay(s, rec, run)
	if err != nil {
		t.Fatal(err)
	}
	return rec, relay.Recover(ctx)
}

// bookMark reads the mark the book holds of its journal (nil: none).
func bookMark(t *testing.T, dbPath string) []byte {
	t.Helper()
	var mark []byte
	err := outboxtest.RawDB(t, dbPath).QueryRow(`SELECT mark FROM outbox_book_mark`).Scan(&mark)
	if err != nil {
		t.Fatal(err)
	}
	return mark
}

// copyDir copies the journal's directory (closed) to dst, in place of what dst held.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

func TestASecondStartAfterAPassingBookCheckListsOnlyTheRunsWithLinesAfterItsMark(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	life(t, dbPath, dir, "monday", orders(1, 10))
	// Tuesday's start marks the journal's end after monday's lines.
	life(t, dbPath, dir, "tuesday", orders(11, 17))
	rec, err := startChecked(t, dbPath, dir, "wednesday")
	if err != nil {
		t.Fatal(err)
	}
	if want := []sinceCall{{marked: true, runs: []string{"tuesday"}}}; !equalCalls(rec.calls, want) {
		t.Fatalf("the check listed %+v; want %+v", rec.calls, want)
	}
	// That start marked the journal's end after tuesday's lines: nothing came after.
	rec, err = startChecked(t, dbPath, dir, "thursday")
	if err != nil {
		t.Fatal(err)
	}
	if want := []sinceCall{{marked: true}}; !equalCalls(rec.calls, want) {
		t.Fatalf("the check listed %+v; want %+v", rec.calls, want)
	}
}

func TestABookRestoredFromBeforeTheMarkStillStopsTheStartAndKeepsItsMark(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir, saved := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal"), filepath.Join(tmp, "backup.db")
	life(t, dbPath, dir, "monday", orders(1, 10))
	life(t, dbPath, dir, "tuesday", orders(11, 17))
	// The backup holds the mark tuesday's start wrote: the journal's end after monday.
	backup(t, dbPath, saved)
	life(t, dbPath, dir, "wednesday", orders(18, 20))
	life(t, dbPath, dir, "thursday", orders(21, 22))
	backup(t, saved, dbPath)
	mark := bookMark(t, dbPath)

	rec, err := startChecked(t, dbPath, dir, "friday")
	if !errors.Is(err, outbox.ErrBookBehind) || !strings.Contains(err.Error(), `"wednesday"`) ||
		!strings.Contains(err.Error(), `"thursday"`) || !strings.Contains(err.Error(), "2 runs") {
		t.Fatalf("Recover: %v; want ErrBookBehind naming wednesday and thursday", err)
	}
	if want := []sinceCall{{marked: true, runs: []string{"thursday", "tuesday", "wednesday"}}}; !equalCalls(rec.calls, want) {
		t.Fatalf("the check listed %+v; want %+v", rec.calls, want)
	}
	if got := bookMark(t, dbPath); !slices.Equal(got, mark) {
		t.Fatal("a check that failed moved the book's mark")
	}
}

func TestAJournalReplacedByAnotherMakesTheFullCheckRun(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	life(t, dbPath, dir, "monday", orders(1, 10))
	life(t, dbPath, dir, "tuesday", orders(11, 12))
	mark := bookMark(t, dbPath)

	// Another engine's journal: a run this book never had, then monday's lines as this book has
	// them, ending further on than the mark. After the mark it holds only lines of monday's, which
	// the book knows: trusting the mark would pass it.
	otherDB, otherDir := filepath.Join(tmp, "other.db"), filepath.Join(tmp, "other")
	life(t, otherDB, otherDir, "stranger", orders(100, 100))
	life(t, otherDB, otherDir, "monday", orders(1, 10))
	copyDir(t, otherDir, dir)

	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.SinkRunsSince(outboxtest.Patient(t), mark); !errors.Is(err, outbox.ErrMarkUnknown) {
		t.Fatalf("SinkRunsSince with another journal's mark: %v; want ErrMarkUnknown", err)
	}
	j.Close()

	rec, err := startChecked(t, dbPath, dir, "wednesday")
	if !errors.Is(err, outbox.ErrBookBehind) || !strings.Contains(err.Error(), `"stranger"`) {
		t.Fatalf("Recover: %v; want ErrBookBehind naming stranger", err)
	}
	if len(rec.calls) != 2 || !errors.Is(rec.calls[0].err, outbox.ErrMarkUnknown) || rec.calls[1].marked {
		t.Fatalf("the check listed %+v; want the mark refused, then every run", rec.calls)
	}
}

func TestAJournalRestoredFromBeforeTheMarkMakesTheFullCheckRun(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir, saved := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal"), filepath.Join(tmp, "saved")
	life(t, dbPath, dir, "monday", orders(1, 10))
	copyDir(t, dir, saved)
	life(t, dbPath, dir, "tuesday", orders(11, 17))
	life(t, dbPath, dir, "wednesday", orders(18, 20))
	copyDir(t, saved, dir)

	rec, _ := startChecked(t, dbPath, dir, "thursday")
	if len(rec.calls) != 2 || !errors.Is(rec.calls[0].err, outbox.ErrMarkUnknown) || rec.calls[1].marked ||
		!slices.Equal(rec.calls[1].runs, []string{"monday"}) {
		t.Fatalf("the check listed %+v; want the mark refused, then every run", rec.calls)
	}
}

func TestRetentionDeletingTheMarksLineFallsBackToTheFullCheck(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dbPath, dir := filepath.Join(tmp, "book.db"), filepath.Join(tmp, "journal")
	life(t, dbPath, dir, "monday", orders(1, 10))
	// Tuesday's start marks the end of monday's lines; its own fill several segments.
	life(t, dbPath, dir, "tuesday", orders(11, 40))
	if _, err := journal.Trim(outboxtest.Patient(t), dir, journal.WithMaxBytes(1)); err != nil {
		t.Fatal(err)
	}
	rec, err := startChecked(t, dbPath, dir, "wednesday")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 2 || !errors.Is(rec.calls[0].err, outbox.ErrMarkUnknown) || rec.calls[1].marked ||
		!slices.Contains(rec.calls[1].runs, "tuesday") {
		t.Fatalf("the check listed %+v; want the mark refused, then every run", rec.calls)
	}
	// That full check passed and marked the journal's end again: the next start trusts it.
	rec, err = startChecked(t, dbPath, dir, "thursday")
	if err != nil {
		t.Fatal(err)
	}
	if want := []sinceCall{{marked: true}}; !equalCalls(rec.calls, want) {
		t.Fatalf("the check listed %+v; want %+v", rec.calls, want)
	}
}

func equalCalls(got, want []sinceCall) bool {
	return slices.EqualFunc(got, want, func(a, b sinceCall) bool {
		return a.marked == b.marked && a.err == nil && b.err == nil && slices.Equal(a.runs, b.runs)
	})
}

func TestAMarkNotOfTheJournalsFormIsUnknownToTheJournalAndTheFile(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	f, err := journal.OpenFile(filepath.Join(t.TempDir(), "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range []outbox.SinceLister{j, f} {
		runs, end, err := l.SinkRunsSince(ctx, nil)
		if err != nil || len(runs) != 0 || end == nil {
			t.Fatalf("%T: an empty journal lists %v, marks %q, %v", l, runs, end, err)
		}
		if _, _, err := l.SinkRunsSince(ctx, end); err != nil {
			t.Fatalf("%T: its own mark: %v", l, err)
		}
		for _, mark := range [][]byte{[]byte("x"), {}, append(slices.Clip(end), 0)} {
			if _, _, err := l.SinkRunsSince(ctx, mark); !errors.Is(err, outbox.ErrMarkUnknown) {
				t.Errorf("%T: mark %q: %v; want ErrMarkUnknown", l, mark, err)
			}
		}
	}
}
