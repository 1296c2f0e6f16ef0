// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// threeSegments writes a journal of interleaved runs, with a re-delivery, into at least three
// segments of dir.
func threeSegments(t *testing.T, dir string) []segment {
	t.Helper()
	j := openDir(t, dir, WithSegmentSize(600))
	for b := range 6 {
		from := int64(1 + 4*b)
		mustAppend(t, j, "a", runBatch("a", from, 4, "x"))
		mustAppend(t, j, "b", runBatch("b", from, 4, "y"))
		if b == 3 {
			mustAppend(t, j, "a", runBatch("a", from, 4, "x")) // the relay's re-delivery after a crash
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segmentsOf(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	return segs
}

func TestVerifyOfADirectoryEqualsVerifyOfItsSegmentsConcatenated(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	threeSegments(t, dir)
	got, err := VerifyDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Verify(bytes.NewReader(catDir(t, dir)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VerifyDir (-cat +dir):\n%s", diff)
	}
	if got.Lines != 48 || got.Duplicates != 4 || got.Unchecked != 0 {
		t.Errorf("report %+v: want 48 lines and 4 duplicates, all compared", got)
	}
}

func TestACorruptedMiddleSegmentIsReportedWithItsSegmentNameAndLine(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	segs := threeSegments(t, dir)
	mid := segs[1]
	path := filepath.Join(dir, segmentName(mid.base))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	// The third line's seq becomes another of the same width: the same length, a gap.
	lines[2] = bytes.Replace(lines[2], []byte(`"seq":`), []byte(`"seq":9`), 1)
	lines[2] = bytes.Replace(lines[2], []byte(`"x"}`), []byte(`""}`), 1)
	lines[2] = bytes.Replace(lines[2], []byte(`"y"}`), []byte(`""}`), 1)
	corrupt := bytes.Join(lines, nil)
	if len(corrupt) != len(b) {
		t.Fatalf("the corruption changed the length: %d, was %d", len(corrupt), len(b))
	}
	if err := os.WriteFile(path, corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	firstLines := bytes.Count(must(os.ReadFile(filepath.Join(dir, segmentName(segs[0].base)))), []byte("\n"))
	_, err = VerifyDir(context.Background(), dir)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("VerifyDir: %v, want an *Error", err)
	}
	if e.Segment != segmentName(mid.base) || e.SegmentLine != 3 || e.Line != firstLines+3 {
		t.Errorf("found at segment %q line %d (journal line %d), want %s line 3 (journal line %d): %v",
			e.Segment, e.SegmentLine, e.Line, segmentName(mid.base), firstLines+3, err)
	}
	if msg := err.Error(); !bytes.Contains([]byte(msg), []byte(segmentName(mid.base)+" line 3")) {
		t.Errorf("message %q does not name the segment and its line", msg)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestASealedSegmentEndingInATornLineIsReportedAndNotJoinedToTheNext(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	segs := threeSegments(t, dir)
	path := filepath.Join(dir, segmentName(segs[0].base))
	if err := os.Truncate(path, segs[0].size-1); err != nil {
		t.Fatal(err)
	}
	_, err := VerifyDir(context.Background(), dir)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrMalformed) || e.Segment != segmentName(segs[0].base) {
		t.Fatalf("VerifyDir: %v, want ErrMalformed in the first segment", err)
	}
}

func TestASegmentThatDoesNotBeginWhereTheOneBeforeEndsIsReported(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	segs := threeSegments(t, dir)
	// The middle segment goes: the journal now lacks its lines, though each run may still look
	// dense when the lost lines were a whole batch.
	if err := os.Remove(filepath.Join(dir, segmentName(segs[1].base))); err != nil {
		t.Fatal(err)
	}
	_, err := VerifyDir(context.Background(), dir)
	var e *Error
	if !errors.As(err, &e) || e.Segment != segmentName(segs[0].base) || !bytes.Contains([]byte(e.Reason), []byte(segmentName(segs[2].base))) {
		t.Fatalf("VerifyDir: %v, want the first segment's end named against the next one's name", err)
	}
}

func TestAJournalWhoseFirstSegmentsRetentionRemovedLetsRunsBeginMidway(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	segs := threeSegments(t, dir)
	if err := os.Remove(filepath.Join(dir, segmentName(segs[0].base))); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Start != segs[1].base || rep.Runs["a"].First <= 1 || rep.Runs["a"].Last != 24 {
		t.Errorf("report %+v: want Start %d and run a from a later seq up to 24", rep, segs[1].base)
	}
}

func TestVerifyDirRefusesADirectoryWithoutSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDir(context.Background(), dir); !errors.Is(err, ErrNotJournal) {
		t.Errorf("VerifyDir of a directory without segments: %v, want ErrNotJournal", err)
	}
}

// repeatLines is a journal of one run of n lines, then a re-delivery of seq with other bytes.
func repeatLines(n int, seq int64) []byte {
	var b bytes.Buffer
	for s := range int64(n) {
		fmt.Fprintf(&b, `{"engine_run_id":"a","seq":%d,"w":"x"}`+"\n", s+1)
	}
	fmt.Fprintf(&b, `{"engine_run_id":"a","seq":%d,"w":"other"}`+"\n", seq)
	return b.Bytes()
}

func TestARepeatWithinTheWindowIsComparedAndAnOlderOneCheckedByItsKeyOnly(t *testing.T) {
	t.Parallel()
	if _, err := Verify(bytes.NewReader(repeatLines(100, 91)), WithRepeatWindow(10)); !errors.Is(err, ErrPayloadConflict) {
		t.Errorf("a conflict among the last 10 seqs: %v, want ErrPayloadConflict", err)
	}
	rep, err := Verify(bytes.NewReader(repeatLines(100, 90)), WithRepeatWindow(10))
	if err != nil || rep.Duplicates != 1 || rep.Unchecked != 1 || rep.Runs["a"].Unchecked != 1 {
		t.Errorf("a repeat older than the window: (%+v, %v), want one duplicate, unchecked", rep, err)
	}
	// The default window holds two relay batches.
	if _, err := Verify(bytes.NewReader(repeatLines(2000, 2000-DefaultRepeatWindow+1))); !errors.Is(err, ErrPayloadConflict) {
		t.Errorf("a conflict within the default window: %v", err)
	}
}

// heldDigests counts the digests v's windows hold, and checks the list of runs holding one.
func heldDigests(t *testing.T, v *Verifier) int {
	t.Helper()
	held, listed := 0, 0
	for _, st := range v.runs {
		held += len(st.win)
		if st.winFrom != 0 {
			listed++
		}
	}
	n := 0
	for st := v.head; st != nil; st = st.next {
		n++
	}
	if n != listed || n != v.windows {
		t.Fatalf("%d runs listed, %d hold a window, %d counted", n, listed, v.windows)
	}
	return held
}

// TestVerifyHoldsNothingPerLine: ten times the lines per run leave the Verifier holding the same
// digests, at most the window of the most recent runs; what grows with the runs is a constant each.
func TestVerifyHoldsNothingPerLine(t *testing.T) {
	t.Parallel()
	journalOf := func(runs, lines int) []byte {
		var b bytes.Buffer
		for s := range lines {
			for r := range runs {
				fmt.Fprintf(&b, `{"engine_run_id":"r%d","seq":%d}`+"\n", r, s+1)
			}
		}
		return b.Bytes()
	}
	const window = 16
	var held []int
	for _, lines := range []int{100, 1000} {
		v, err := verify(bytes.NewReader(journalOf(2*windowRuns, lines)), []VerifyOption{WithRepeatWindow(window)})
		if err != nil {
			t.Fatal(err)
		}
		if len(v.runs) != 2*windowRuns || v.lines != 2*windowRuns*lines {
			t.Fatalf("%d runs, %d lines verified", len(v.runs), v.lines)
		}
		h := heldDigests(t, v)
		if h > windowRuns*window {
			t.Errorf("%d lines a run: %d digests held, more than %d runs' windows of %d", lines, h, windowRuns, window)
		}
		held = append(held, h)
	}
	if held[0] != held[1] {
		t.Errorf("digests held: %d at 100 lines a run, %d at 1000", held[0], held[1])
	}
}
