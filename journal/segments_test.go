// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

var _ outbox.Sink = (*Journal)(nil)

// runLine is run's journal line of seq, told apart from others by word.
func runLine(run string, seq int64, word string) outbox.EventLine {
	return outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"w":%q}`, run, seq, word)}
}

func runBatch(run string, from int64, n int, word string) []outbox.EventLine {
	out := make([]outbox.EventLine, n)
	for i := range out {
		out[i] = runLine(run, from+int64(i), word)
	}
	return out
}

func openDir(t *testing.T, dir string, opts ...Option) *Journal {
	t.Helper()
	j, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func mustAppend(t *testing.T, j *Journal, run string, lines []outbox.EventLine) {
	t.Helper()
	if err := j.Append(context.Background(), run, lines); err != nil {
		t.Fatalf("append %s from %d: %v", run, lines[0].Seq, err)
	}
}

// segmentsOf lists the segments of dir with their sizes, checking that each is named by where it
// begins in the concatenation.
func segmentsOf(t *testing.T, dir string) []segment {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var segs []segment
	pos := int64(-1)
	for _, name := range names {
		base, ok := parseBase(filepath.Base(name), segmentExt)
		if !ok {
			t.Fatalf("%s is not a segment name", name)
		}
		if pos >= 0 && base != pos {
			t.Fatalf("%s begins at %d of the journal, its name says %d", name, pos, base)
		}
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		segs = append(segs, segment{base: base, size: st.Size()})
		pos = base + st.Size()
	}
	return segs
}

// catDir is `cat DIR/*.jsonl`.
func catDir(t *testing.T, dir string) []byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var b []byte
	for _, name := range names {
		c, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, c...)
	}
	return b
}

func linesText(lines []outbox.EventLine) string {
	var b strings.Builder
	for _, l := range lines {
		b.Write(l.Line)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestAJournalRollsToANewSegmentWhenABatchWouldTakeTheLastPastTheSegmentSize(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	const size = 300
	j := openDir(t, dir, WithSegmentSize(size))
	var want strings.Builder
	for i := range 20 {
		b := runBatch("r", int64(3*i+1), 3, "x")
		mustAppend(t, j, "r", b)
		want.WriteString(linesText(b))
	}
	segs := segmentsOf(t, dir)
	if len(segs) < 5 {
		t.Fatalf("%d segments for %d bytes at a segment size of %d", len(segs), want.Len(), size)
	}
	if segs[0].base != 0 {
		t.Fatalf("the first segment begins at %d", segs[0].base)
	}
	batchLen := int64(len(linesText(runBatch("r", 1, 3, "x"))))
	for i, s := range segs {
		if s.size > size || (i < len(segs)-1 && s.size+batchLen <= size) {
			t.Errorf("segment %d is %d bytes (size %d, a batch %d)", i, s.size, size, batchLen)
		}
		if _, err := os.Stat(filepath.Join(dir, indexName(s.base))); (err == nil) != (i < len(segs)-1) {
			t.Errorf("segment %d of %d: its index file: %v", i, len(segs), err)
		}
	}
	if got := string(catDir(t, dir)); got != want.String() {
		t.Fatalf("cat DIR/*.jsonl is not the journal in order:\n%s", got)
	}
	rep, err := Verify(bytes.NewReader(catDir(t, dir)))
	if err != nil || rep.Runs["r"].Last != 60 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

func TestALineLargerThanTheSegmentSizeGoesAloneInItsSegment(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(100))
	mustAppend(t, j, "r", runBatch("r", 1, 1, "a"))
	big := runLine("r", 2, strings.Repeat("b", 500))
	mustAppend(t, j, "r", []outbox.EventLine{big})
	mustAppend(t, j, "r", runBatch("r", 3, 1, "c"))
	segs := segmentsOf(t, dir)
	if len(segs) != 3 || segs[1].size != int64(len(big.Line)+1) {
		t.Fatalf("segments %v: the large line is not alone in the second", segs)
	}
}

func TestABatchStaysInOneSegment(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(400))
	b1 := runBatch("r", 1, 4, "a") // about 200 bytes
	b2 := runBatch("r", 5, 4, "b")
	b3 := runBatch("r", 9, 10, "c") // larger than the segment size: alone
	mustAppend(t, j, "r", b1)
	mustAppend(t, j, "r", b2)
	mustAppend(t, j, "r", b3)
	segs := segmentsOf(t, dir)
	want := []int64{int64(len(linesText(b1)) + len(linesText(b2))), int64(len(linesText(b3)))}
	if len(segs) != 2 || segs[0].size != want[0] || segs[1].size != want[1] {
		t.Fatalf("segments %v, want sizes %v", segs, want)
	}
}

// sealedJournal writes runs "r" (seqs 1–6, three to a batch, one batch a segment) and "x" (1–2) to a
// journal of small segments and closes it.
func sealedJournal(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "j")
	j, err := Open(dir, WithSegmentSize(150))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, "x", runBatch("x", 1, 2, "x"))
	mustAppend(t, j, "r", runBatch("r", 1, 3, "a"))
	mustAppend(t, j, "r", runBatch("r", 4, 3, "b"))
	mustAppend(t, j, "r", runBatch("r", 7, 1, "c"))
	j.Close()
	if n := len(segmentsOf(t, dir)); n != 4 {
		t.Fatalf("%d segments, want 4", n)
	}
	return dir
}

func TestARedeliveryAcrossASegmentBoundaryIsComparedByteForByte(t *testing.T) {
	t.Parallel()
	for _, reopen := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "j")
		j, err := Open(dir, WithSegmentSize(150))
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, j, "r", runBatch("r", 1, 3, "a"))
		mustAppend(t, j, "r", runBatch("r", 4, 3, "b"))
		if reopen {
			j.Close()
			j = openDir(t, dir, WithSegmentSize(150))
		}
		redelivery := append(runBatch("r", 2, 2, "a"), runBatch("r", 4, 2, "b")...)
		for _, bad := range []int{0, 3} {
			other := slices.Clone(redelivery)
			other[bad] = runLine("r", other[bad].Seq, "other")
			if err := j.Append(context.Background(), "r", other); !errors.Is(err, ErrPayloadConflict) || !errors.Is(err, outbox.ErrSinkRefused) {
				t.Fatalf("reopen %v: a re-delivery with other bytes at seq %d: %v", reopen, other[bad].Seq, err)
			}
		}
		mustAppend(t, j, "r", redelivery)
		if last, err := j.LastSeq("r"); err != nil || last != 6 {
			t.Fatalf("LastSeq = %d, %v", last, err)
		}
		j.Close()
	}
}

func TestARunsEarlierCopyInASealedSegmentIsFoundAfterAReopen(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	j := openDir(t, dir, WithSegmentSize(150))
	ctx := context.Background()
	if err := j.Append(ctx, "x", runBatch("x", 1, 1, "other")); !errors.Is(err, ErrPayloadConflict) {
		t.Fatalf("a run's first line against its copy in the first segment: %v, want ErrPayloadConflict", err)
	}
	if err := j.Append(ctx, "x", runBatch("x", 4, 1, "x")); !errors.Is(err, ErrStreamGap) {
		t.Fatalf("a gap after a run in a sealed segment: %v, want ErrStreamGap", err)
	}
	for run, want := range map[string]int64{"x": 2, "r": 7, "none": 0} {
		if got, err := j.LastSeq(run); err != nil || got != want {
			t.Errorf("LastSeq(%q) = %d, %v; want %d", run, got, err, want)
		}
	}
	mustAppend(t, j, "x", runBatch("x", 2, 2, "x"))
}

func TestAStartReadsTheIndexesAndTheLastSegmentNotTheSealedOnes(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	segs := segmentsOf(t, dir)
	j := openDir(t, dir)
	if _, err := j.LastSeq("r"); err != nil {
		t.Fatal(err)
	}
	if tail := segs[len(segs)-1].size; j.read != tail {
		t.Fatalf("the start read %d bytes of lines, the last segment is %d", j.read, tail)
	}
}

// damageIndex changes the index file of dir's first segment with how, opens the journal, and checks
// that it is rebuilt from the segment, not trusted: the runs' last seqs are right, the index file is
// the one sealing wrote, and the start read the segment.
func damageIndex(t *testing.T, how func(path string, b []byte)) {
	t.Helper()
	dir := sealedJournal(t)
	path := filepath.Join(dir, indexName(0))
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	how(path, good)
	j := openDir(t, dir)
	for run, want := range map[string]int64{"x": 2, "r": 7} {
		if got, err := j.LastSeq(run); err != nil || got != want {
			t.Errorf("LastSeq(%q) = %d, %v; want %d", run, got, err, want)
		}
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, good) {
		t.Errorf("the index was not written again as sealing wrote it (%v)", err)
	}
	if segs := segmentsOf(t, dir); j.read < segs[0].size+segs[len(segs)-1].size {
		t.Errorf("the start read %d bytes: the first segment was not read", j.read)
	}
	if err := j.Append(context.Background(), "x", runBatch("x", 1, 1, "other")); !errors.Is(err, ErrPayloadConflict) {
		t.Errorf("the rebuilt index does not find the run's first line: %v", err)
	}
}

func TestATornIndexIsRebuiltFromItsSegment(t *testing.T) {
	t.Parallel()
	damageIndex(t, func(path string, b []byte) { os.WriteFile(path, b[:len(b)/2], 0o644) })
}

func TestAnIndexFailingItsChecksumIsRebuiltFromItsSegment(t *testing.T) {
	t.Parallel()
	damageIndex(t, func(path string, b []byte) {
		b = slices.Clone(b)
		b[len(segIndexMagic)+3] ^= 1
		os.WriteFile(path, b, 0o644)
	})
}

func TestAMissingIndexIsRebuiltFromItsSegment(t *testing.T) {
	t.Parallel()
	damageIndex(t, func(path string, _ []byte) { os.Remove(path) })
}

func TestTheIndexOfAnotherSegmentIsNotTrusted(t *testing.T) {
	t.Parallel()
	damageIndex(t, func(path string, _ []byte) {
		other, err := os.ReadFile(filepath.Join(filepath.Dir(path), indexName(segmentsOf(t, filepath.Dir(path))[1].base)))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(path, other, 0o644)
	})
}

func TestAnIndexWhoseSegmentsLastLineChangedIsNotTrusted(t *testing.T) {
	t.Parallel()
	damageIndex(t, func(path string, good []byte) {
		// A valid index of the same position and size, but of other content: a stale one.
		si, err := parseSegIndex(good)
		if err != nil {
			t.Fatal(err)
		}
		si.runs = si.runs[:1]
		si.lastSum[0] ^= 1
		os.WriteFile(path, si.encode(), 0o644)
	})
}

func TestAnotherJournalsIndexOfASegmentWithTheSamePositionSizeAndLastLineIsNotTrusted(t *testing.T) {
	t.Parallel()
	// Two journals whose first segments differ only in their first line: run "a" in one, "b" in the
	// other, then the same line of run "z".
	size := int64(2 * (len(runLine("a", 1, "w").Line) + 1))
	build := func(first string) string {
		dir := filepath.Join(t.TempDir(), "j")
		j := openDir(t, dir, WithSegmentSize(size))
		mustAppend(t, j, first, runBatch(first, 1, 1, "w"))
		mustAppend(t, j, "z", runBatch("z", 1, 1, "w"))
		mustAppend(t, j, "q", runBatch("q", 1, 1, "w"))
		j.Close()
		return dir
	}
	a, b := build("a"), build("b")
	// They were written at different moments; the file system's clock may tick more coarsely than
	// the time between them here.
	if err := os.Chtimes(filepath.Join(a, segmentName(0)), time.Time{}, time.Unix(1e9, 0)); err != nil {
		t.Fatal(err)
	}
	foreign, err := os.ReadFile(filepath.Join(b, indexName(0)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, indexName(0)), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	j := openDir(t, a, WithSegmentSize(size))
	if last, err := j.LastSeq("a"); err != nil || last != 1 {
		t.Fatalf("LastSeq(a) = %d, %v; want 1: the other journal's index was trusted", last, err)
	}
	if err := j.Append(context.Background(), "a", runBatch("a", 1, 1, "other")); !errors.Is(err, ErrPayloadConflict) {
		t.Fatalf("a second line of run a seq 1 with other bytes: %v, want ErrPayloadConflict", err)
	}
}

func TestAnAppendToASealedSegmentByAnotherProgramIsFoundAtOpen(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	if err := appendBytes(filepath.Join(dir, segmentName(0)), jline(9, "z")+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrModified) {
		t.Fatalf("Open after another program appended to a sealed segment: %v, want ErrModified", err)
	}
}

func TestAnAppendToTheLastSegmentByAnotherProgramIsRefused(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	j := openDir(t, dir, WithSegmentSize(150))
	mustAppend(t, j, "x", runBatch("x", 3, 1, "x"))
	segs := segmentsOf(t, dir)
	last := filepath.Join(dir, segmentName(segs[len(segs)-1].base))
	if err := appendBytes(last, string(runLine("y", 1, "y").Line)+"\n"); err != nil {
		t.Fatal(err)
	}
	before := catDir(t, dir)
	if err := j.Append(context.Background(), "x", runBatch("x", 4, 1, "x")); !errors.Is(err, ErrModified) || !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Append after another program appended to the last segment: %v, want ErrModified", err)
	}
	if !bytes.Equal(catDir(t, dir), before) {
		t.Fatal("the refused append wrote")
	}
}

func TestADirectoryHoldingAForeignFileIsNotOpened(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"notes.txt", "1.jsonl", "00000000000000000000.jsonl.bak", "sub"} {
		dir := sealedJournal(t)
		if name == "sub" {
			os.Mkdir(filepath.Join(dir, name), 0o755)
		} else {
			os.WriteFile(filepath.Join(dir, name), []byte("{}\n"), 0o644)
		}
		before := catDir(t, dir)
		ents, _ := os.ReadDir(dir)
		if _, err := Open(dir); !errors.Is(err, ErrNotJournal) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s: %v, want ErrNotJournal naming it", name, err)
		}
		after, _ := os.ReadDir(dir)
		if !bytes.Equal(catDir(t, dir), before) || len(after) != len(ents) {
			t.Fatalf("%s: the refused Open changed the directory", name)
		}
	}
}

func TestOpenRefusesBadOptionsAndCreatesNothing(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]Option{{WithSegmentSize(0)}, {WithSegmentSize(-1)}, {WithCheckpointEvery(0)}, {WithCheckpointEvery(-1)}, {nil}} {
		dir := filepath.Join(t.TempDir(), "j")
		if j, err := Open(dir, opts...); err == nil {
			j.Close()
			t.Fatalf("%v: opened", opts)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused Open left %s behind", dir)
		}
	}
	if _, err := Open(""); err == nil {
		t.Fatal("Open(\"\") opened")
	}
}

func TestOpenRefusesAPathThatIsAFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	os.WriteFile(path, []byte(jline(1, "a")+"\n"), 0o644)
	if _, err := Open(path); !errors.Is(err, ErrNotJournal) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Open of a file: %v, want ErrNotJournal", err)
	}
	if b, _ := os.ReadFile(path); string(b) != jline(1, "a")+"\n" {
		t.Fatal("the file changed")
	}
}

func TestASecondOpenOfAnOpenJournalIsRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir)
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second Open: %v, want ErrLocked", err)
	}
	j.Close()
	openDir(t, dir)
}

func TestTheLastSegmentsTornTailIsCutAtOpen(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	segs := segmentsOf(t, dir)
	last := filepath.Join(dir, segmentName(segs[len(segs)-1].base))
	appendBytes(last, `{"engine_run_id":"r","seq":8,"w":`)
	j := openDir(t, dir, WithSegmentSize(150))
	if st, _ := os.Stat(last); st.Size() != segs[len(segs)-1].size {
		t.Fatalf("the torn tail was not cut: %d bytes", st.Size())
	}
	mustAppend(t, j, "r", runBatch("r", 8, 1, "d"))
	if rep, err := Verify(bytes.NewReader(catDir(t, dir))); err != nil || rep.Runs["r"].Last != 8 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

func TestAStaleIndexBesideTheLastSegmentIsRemovedAtOpen(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	segs := segmentsOf(t, dir)
	// The last segment's index, as a crash between writing it and starting the next segment leaves
	// it; the segment then grew.
	os.WriteFile(filepath.Join(dir, indexName(segs[len(segs)-1].base)), []byte("stale"), 0o644)
	os.WriteFile(filepath.Join(dir, indexName(segs[len(segs)-1].base)+".tmp"), []byte("torn"), 0o644)
	j := openDir(t, dir, WithSegmentSize(150))
	for _, name := range []string{indexName(segs[len(segs)-1].base), indexName(segs[len(segs)-1].base) + ".tmp"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", name, err)
		}
	}
	mustAppend(t, j, "r", runBatch("r", 8, 1, "d"))
}

func TestAContextDoneAtEachStepOfTheFirstReadIsTakenUpByTheNextCall(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j, err := Open(dir, WithSegmentSize(3<<20))
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 4000)
	var seq int64
	for range 4 {
		b := runBatch("r", seq+1, 512, pad)
		mustAppend(t, j, "r", b)
		seq += 512
	}
	j.Close()
	segs := segmentsOf(t, dir)
	if len(segs) < 2 {
		t.Fatalf("%d segments", len(segs))
	}
	os.Remove(filepath.Join(dir, indexName(0))) // so that the first read rebuilds one too
	var total int64
	for _, s := range segs {
		total += s.size
	}
	j = openDir(t, dir)
	steps := 0
	for n := int64(1); ; n++ {
		got, err := j.LastSeqContext(newCancelAfter(n, nil), "r")
		if err == nil {
			if got != seq {
				t.Fatalf("LastSeq = %d, want %d", got, seq)
			}
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a read cancelled at its step %d: %v", n, err)
		}
		steps++
	}
	if steps < 3 {
		t.Fatalf("the read was cancelled at %d steps only", steps)
	}
	if j.read > total+2*readChunk {
		t.Errorf("%d bytes read for %d: a cancelled read started again", j.read, total)
	}
	if err := j.Append(newCancelAfter(1, nil), "r", runBatch("r", seq+1, 1, "z")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a done context: %v", err)
	}
	mustAppend(t, j, "r", runBatch("r", seq+1, 1, "z"))
}

func FuzzParseSegmentIndex(f *testing.F) {
	si := &segIndex{base: 100, size: 400, lastStart: 350, runs: []segRun{
		{id: "a", spans: []span{{seq: 1, off: 0, n: 2, size: 120}, {seq: 5, off: 200, n: 1, size: 60}}},
		{id: "b", spans: []span{{seq: 3, off: 120, n: 1, size: 80}}},
	}}
	f.Add(si.encode())
	ck := *si
	ck.checkpoint, ck.ino = true, 12345
	f.Add(ck.encode())
	f.Add([]byte(segIndexMagic))
	f.Add([]byte{})
	f.Add(encodeSummary([]segment{{base: 100, size: 400, ino: 7, si: si}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The seal summary holds indexes with the same checks.
		if recs, err := parseSummary(b); err != nil {
			if !errors.Is(err, errBadIndex) {
				t.Fatalf("a summary's error that is not errBadIndex: %v", err)
			}
		} else {
			var segs []segment
			for _, r := range recs {
				if r.ino != 0 {
					segs = append(segs, segment{base: r.si.base, size: r.si.size, ino: r.ino, si: r.si})
				}
			}
			slices.SortFunc(segs, func(a, b segment) int { return cmp.Compare(a.base, b.base) })
			again, err := parseSummary(encodeSummary(segs))
			if err != nil || len(again) != len(segs) {
				t.Fatalf("a summary does not survive encode and parse: %d of %d records, %v", len(again), len(segs), err)
			}
			for _, sg := range segs {
				if fmt.Sprint(again[sg.base].si) != fmt.Sprint(sg.si) || again[sg.base].ino != sg.ino {
					t.Fatalf("encode and parse changed segment %d's record", sg.base)
				}
			}
		}
		if c, err := parseCheckpoint(b); err == nil {
			if _, err := parseSegIndex(b); err == nil {
				t.Fatal("one file parsed both as a checkpoint and as a seal index")
			}
			if d, err := parseCheckpoint(c.encode()); err != nil || fmt.Sprint(c) != fmt.Sprint(d) {
				t.Fatalf("a checkpoint does not survive encode and parse: %v", err)
			}
		}
		x, err := parseSegIndex(b)
		if err != nil {
			if !errors.Is(err, errBadIndex) {
				t.Fatalf("an error that is not errBadIndex: %v", err)
			}
			return
		}
		y, err := parseSegIndex(x.encode())
		if err != nil {
			t.Fatalf("an index parsed does not parse again once encoded: %v", err)
		}
		if fmt.Sprint(x) != fmt.Sprint(y) {
			t.Fatalf("encode and parse changed it:\n%v\n%v", x, y)
		}
		for _, r := range x.runs {
			for _, sp := range r.spans {
				if sp.off < 0 || sp.off+int64(sp.size) > x.size || sp.n == 0 || sp.seq < 1 {
					t.Fatalf("a span outside its segment was accepted: %+v in %d bytes", sp, x.size)
				}
			}
		}
	})
}

func TestAFailedFdatasyncCutsTheBatchBackAndTheJournalTakesNoMoreUntilReopened(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	ops := &scriptedOps{syncErr: syscall.EIO, from: 3}
	j, err := Open(dir, WithSegmentSize(150), withOps(ops))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, "r", runBatch("r", 1, 2, "a"))
	mustAppend(t, j, "r", runBatch("r", 3, 2, "b")) // a roll: the batch begins the second segment
	want := string(catDir(t, dir))
	if err := j.Append(context.Background(), "r", runBatch("r", 5, 1, "c")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("an append whose fdatasync failed: %v", err)
	}
	if err := j.Append(context.Background(), "r", runBatch("r", 5, 1, "c")); !errors.Is(err, ErrFailed) {
		t.Fatalf("an append after a failed fdatasync: %v, want ErrFailed", err)
	}
	if got := string(catDir(t, dir)); got != want {
		t.Fatalf("the failed batch was not cut back:\n%s", got)
	}
	j.Close()
	j = openDir(t, dir, WithSegmentSize(150))
	mustAppend(t, j, "r", runBatch("r", 5, 1, "c"))
	if last, err := j.LastSeq("r"); err != nil || last != 5 {
		t.Fatalf("LastSeq = %d, %v", last, err)
	}
}

func TestAnAppendToASealedSegmentWhileTheJournalIsOpenIsFoundWhenTheSegmentIsRead(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	j := openDir(t, dir, WithSegmentSize(150))
	if _, err := j.LastSeq("r"); err != nil {
		t.Fatal(err)
	}
	segs := segmentsOf(t, dir)
	for _, s := range segs[:len(segs)-1] {
		if err := appendBytes(filepath.Join(dir, segmentName(s.base)), jline(99, "z")+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	// A re-delivery compared with its copy in the segment the start read last, kept open.
	if err := j.Append(context.Background(), "r", runBatch("r", 6, 1, "b")); !errors.Is(err, ErrModified) {
		t.Fatalf("a re-delivery read from the segment read last: %v, want ErrModified", err)
	}
	// And one of "x"'s first line is compared with its copy in the first segment.
	if err := j.Append(context.Background(), "x", runBatch("x", 1, 2, "x")); !errors.Is(err, ErrModified) {
		t.Fatalf("a re-delivery read from a sealed segment another program appended to: %v, want ErrModified", err)
	}
}

func TestAppendsAndLastSeqFromManyGoroutinesRollWithoutLosingALine(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(1000))
	runs := []string{"a", "b", "c", "d"}
	errs := make(chan error, len(runs)+1)
	for _, run := range runs {
		go func() {
			for seq := int64(1); seq <= 60; seq += 3 {
				if err := j.Append(context.Background(), run, runBatch(run, seq, 3, run)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	go func() {
		for range 200 {
			if _, err := j.LastSeq("a"); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range len(runs) + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Verify(bytes.NewReader(catDir(t, dir)))
	if err != nil || rep.Lines != 240 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	for _, run := range runs {
		if rep.Runs[run].Last != 60 {
			t.Errorf("run %s ends at %d", run, rep.Runs[run].Last)
		}
	}
	if n := len(segmentsOf(t, dir)); n < 10 {
		t.Fatalf("%d segments", n)
	}
}

func TestASealedSegmentRewrittenToEndWithoutANewlineIsNotTrustedWhateverItsIndexSays(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	path := filepath.Join(dir, segmentName(0))
	b, _ := os.ReadFile(path)
	b[len(b)-1] = ' '
	os.WriteFile(path, b, 0o644)
	good, _ := os.ReadFile(filepath.Join(dir, indexName(0)))
	si, err := parseSegIndex(good)
	if err != nil {
		t.Fatal(err)
	}
	si.lastSum = [32]byte{}
	os.WriteFile(filepath.Join(dir, indexName(0)), si.encode(), 0o644)
	j := openDir(t, dir)
	if _, err := j.LastSeq("x"); !errors.Is(err, ErrModified) {
		t.Fatalf("LastSeq over a sealed segment that no longer ends a line: %v, want ErrModified", err)
	}
}

// TestSegmentSizesAroundALinesLengthLoseNoLineAndKeepEveryRunsLastSeq appends batches of one to three
// lines, each delivered twice, with segment sizes of 1 byte and around one and two lines' length,
// reopening after every batch (with the segment size changed every other time): the segments chain,
// hold every line once per delivery in order, and each reopen knows the run's last seq and refuses
// its last line with other bytes.
func TestSegmentSizesAroundALinesLengthLoseNoLineAndKeepEveryRunsLastSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := int64(len(runLine("r", 1, "w").Line) + 1)
	for _, size := range []int64{1, n - 1, n, n + 1, 2*n - 1, 2 * n, 2*n + 1} {
		dir := filepath.Join(t.TempDir(), "j")
		var want strings.Builder
		seq := int64(1)
		for i := range 9 {
			j := openDir(t, dir, WithSegmentSize(size+int64(i%2)))
			b := runBatch("r", seq, i%3+1, "w")
			mustAppend(t, j, "r", b)
			mustAppend(t, j, "r", b)
			want.WriteString(linesText(b) + linesText(b))
			seq += int64(len(b))
			j.Close()
			j = openDir(t, dir, WithSegmentSize(size))
			if last, err := j.LastSeq("r"); err != nil || last != seq-1 {
				t.Fatalf("segment size %d, batch %d: LastSeq %d, %v; want %d", size, i, last, err, seq-1)
			}
			if err := j.Append(ctx, "r", []outbox.EventLine{runLine("r", seq-1, "other")}); !errors.Is(err, ErrPayloadConflict) {
				t.Fatalf("segment size %d, batch %d: the last line with other bytes: %v, want ErrPayloadConflict", size, i, err)
			}
			j.Close()
		}
		segmentsOf(t, dir)
		if got := string(catDir(t, dir)); got != want.String() {
			t.Fatalf("segment size %d: the segments hold\n%s\nwant\n%s", size, got, want.String())
		}
	}
}

func TestAJournalOpenedThroughASymbolicLinkIsLockedAgainstItsRealPath(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	j := openDir(t, link)
	if _, err := j.LastSeq("r"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open by the real path of a journal open through a link: %v, want ErrLocked", err)
	}
}

func TestAnIndexThatIsASymbolicLinkIsNotOpened(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	idx := filepath.Join(dir, indexName(segmentsOf(t, dir)[0].base))
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "x.idx")
	os.WriteFile(elsewhere, b, 0o644)
	os.Remove(idx)
	if err := os.Symlink(elsewhere, idx); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNotJournal) {
		t.Fatalf("Open with an index that is a link: %v, want ErrNotJournal", err)
	}
	if st, err := os.Lstat(idx); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the refused Open changed the link: %v", err)
	}
}

// TestAnOpenWhoseDirectoryAnotherOpenCreatedFirstOpensIt creates the directory between Open's look
// and its mkdir, as another process's Open can: Open goes on and takes the journal (the lock decides
// between two Opens), instead of failing as if the path were unusable. Not parallel: it installs the
// process-wide fault hook.
func TestAnOpenWhoseDirectoryAnotherOpenCreatedFirstOpensIt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	faultpoint.Set(func(point string) {
		if point == faultBeforeMkdir {
			os.Mkdir(dir, 0o755)
		}
	})
	defer faultpoint.Set(nil)
	j := openDir(t, dir)
	faultpoint.Set(nil)
	mustAppend(t, j, "r", runBatch("r", 1, 2, "w"))
	if last, err := j.LastSeq("r"); err != nil || last != 2 {
		t.Fatalf("LastSeq %d, %v; want 2", last, err)
	}
}

func TestOpenFileRefusesASegmentOfAJournalDirectoryAndLeavesItAsItWas(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(200))
	for i := range 4 {
		mustAppend(t, j, "r", runBatch("r", int64(3*i+1), 3, "x"))
	}
	segs, err := SegmentsOf(dir)
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments %v, %v; want a sealed one and the last", segs, err)
	}
	for _, seg := range []string{filepath.Join(dir, segmentName(segs[0].Position)), filepath.Join(dir, segmentName(segs[len(segs)-1].Position))} {
		before, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		f, err := OpenFile(seg)
		if err == nil {
			f.Append(context.Background(), "r", runBatch("r", 13, 1, "x"))
			f.Close()
		}
		if !errors.Is(err, ErrNotJournal) || !strings.Contains(err.Error(), seg) {
			t.Errorf("OpenFile(%s) beside its Journal = %v, want ErrNotJournal naming it", seg, err)
		}
		if after, _ := os.ReadFile(seg); string(after) != string(before) {
			t.Errorf("%s changed", seg)
		}
	}
	mustAppend(t, j, "r", runBatch("r", 13, 1, "x"))
}
