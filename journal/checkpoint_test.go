// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAStartReadsOnlyTheLinesAfterTheLastSegmentsCheckpoint appends more than a checkpoint's
// interval to a segment that is not sealed (default sizes): the next start reads the checkpoint and
// the lines after it, not the segment whole, and the runs it indexes that way are checked as before:
// a re-delivery of a line before the checkpoint is compared byte for byte.
func TestAStartReadsOnlyTheLinesAfterTheLastSegmentsCheckpoint(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 1000)
	var seq int64
	for range 20 {
		for _, run := range []string{"a", "b"} {
			mustAppend(t, j, run, runBatch(run, seq+1, 512, pad))
		}
		seq += 512
	}
	j.Close()
	segs := segmentsOf(t, dir)
	if len(segs) != 1 || segs[0].size < checkpointEvery+4<<20 {
		t.Fatalf("segments %v: the test wants one of more than a checkpoint's interval", segs)
	}
	j = openDir(t, dir)
	for _, run := range []string{"a", "b"} {
		if last, err := j.LastSeq(run); err != nil || last != seq {
			t.Fatalf("LastSeq(%s) = %d, %v; want %d", run, last, err, seq)
		}
	}
	if j.read >= checkpointEvery {
		t.Fatalf("the start read %d bytes of a %d-byte segment: its checkpoint was not used", j.read, segs[0].size)
	}
	mustAppend(t, j, "a", runBatch("a", 1, 3, pad))
	if err := j.Append(context.Background(), "b", runBatch("b", 2, 1, "other")); !errors.Is(err, ErrPayloadConflict) {
		t.Fatalf("a line before the checkpoint re-delivered with other bytes: %v, want ErrPayloadConflict", err)
	}
}

// checkpointed writes a journal of one segment whose checkpoint covers lines of run "a" and
// ends with a line of run "z", then a line of run "q" after it; lines of "a" and "b" have the same
// length, so that another journal's segment can have the same line at the checkpoint's end.
func checkpointed(t *testing.T, first string) (dir string, ck *segIndex) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "j")
	j, err := Open(dir, WithCheckpointEvery(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, first, runBatch(first, 1, 4, "w"))
	mustAppend(t, j, "z", runBatch("z", 1, 1, "w"))
	j.mu.Lock()
	j.checkpoint()
	j.mu.Unlock()
	mustAppend(t, j, "q", runBatch("q", 1, 1, "w"))
	j.Close()
	b, err := os.ReadFile(filepath.Join(dir, indexName(0)))
	if err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	if ck, err = parseCheckpoint(b); err != nil {
		t.Fatal(err)
	}
	return dir, ck
}

// startOf opens dir, reads its runs, and returns how many bytes of lines that read.
func startOf(t *testing.T, dir string, want map[string]int64) int64 {
	t.Helper()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for run, last := range want {
		if got, err := j.LastSeq(run); err != nil || got != last {
			t.Fatalf("LastSeq(%s) = %d, %v; want %d", run, got, err, last)
		}
	}
	return j.read
}

func TestACheckpointIsTrustedBesideTheSegmentItWasWrittenFor(t *testing.T) {
	t.Parallel()
	dir, ck := checkpointed(t, "a")
	segs := segmentsOf(t, dir)
	if read := startOf(t, dir, map[string]int64{"a": 4, "z": 1, "q": 1}); read != segs[0].size-ck.size {
		t.Fatalf("the start read %d bytes; %d follow the checkpoint", read, segs[0].size-ck.size)
	}
}

func TestATornCheckpointIsNotTrusted(t *testing.T) {
	t.Parallel()
	dir, _ := checkpointed(t, "a")
	path := filepath.Join(dir, indexName(0))
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-1], 0o644)
	segs := segmentsOf(t, dir)
	if read := startOf(t, dir, map[string]int64{"a": 4, "z": 1, "q": 1}); read != segs[0].size {
		t.Fatalf("the start read %d bytes of %d", read, segs[0].size)
	}
}

// TestACheckpointWhosePartWasCutBackIsNotTrusted cuts the segment back inside the part the
// checkpoint covers, as a file system that lost synced bytes or a program's truncate leaves it,
// then writes other lines over that part: the checkpoint's part no longer ends with its line.
func TestACheckpointWhosePartWasCutBackIsNotTrusted(t *testing.T) {
	t.Parallel()
	dir, ck := checkpointed(t, "a")
	seg := filepath.Join(dir, segmentName(0))
	lineLen := int64(len(runLine("a", 1, "w").Line) + 1)
	if err := os.Truncate(seg, 2*lineLen); err != nil {
		t.Fatal(err)
	}
	// Cut back only: the segment is shorter than the checkpoint's part.
	startOf(t, dir, map[string]int64{"a": 2, "z": 0, "q": 0})
	// Written again the checkpoint (had it survived) would cover lines of "b" in place of "a"'s.
	if err := os.WriteFile(filepath.Join(dir, indexName(0)), ck.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(linesText(runBatch("b", 1, 4, "w")))
	f.Close()
	startOf(t, dir, map[string]int64{"a": 2, "b": 4, "z": 0, "q": 0})
}

// TestAnotherJournalsCheckpointOfALookAlikeSegmentIsNotTrusted puts beside a segment the
// checkpoint of another journal's segment of the same position whose part ends with the same line
// at the same place, but holds run "b" where this one holds run "a".
func TestAnotherJournalsCheckpointOfALookAlikeSegmentIsNotTrusted(t *testing.T) {
	t.Parallel()
	a, _ := checkpointed(t, "a")
	b, _ := checkpointed(t, "b")
	foreign, err := os.ReadFile(filepath.Join(b, indexName(0)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, indexName(0)), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	startOf(t, a, map[string]int64{"a": 4, "b": 0, "z": 1, "q": 1})
}

// TestACopiedJournalReadsItsLastSegmentWholeOnceAndCheckpointsIt copies a journal's files as cp -r
// does (new files, new times): the copy's checkpoint is not trusted, since nothing ties it to the
// copied segment; the start reads that segment whole and writes its own, so the next one does not.
func TestACopiedJournalReadsItsLastSegmentWholeOnceAndCheckpointsIt(t *testing.T) {
	t.Parallel()
	dir, _ := checkpointed(t, "a")
	cp := filepath.Join(t.TempDir(), "copy")
	os.Mkdir(cp, 0o755)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(cp, e.Name()), b, 0o644)
	}
	segs := segmentsOf(t, cp)
	j, err := Open(cp, WithCheckpointEvery(1))
	if err != nil {
		t.Fatal(err)
	}
	if last, err := j.LastSeq("a"); err != nil || last != 4 {
		t.Fatalf("LastSeq(a) = %d, %v", last, err)
	}
	if j.read != segs[0].size {
		t.Fatalf("the copy's start read %d bytes of %d: the copied checkpoint was trusted", j.read, segs[0].size)
	}
	j.Close()
	if read := startOf(t, cp, map[string]int64{"a": 4, "z": 1, "q": 1}); read != 0 {
		t.Fatalf("the next start read %d bytes: the first did not checkpoint the segment it read", read)
	}
}

// TestASealIndexBesideTheLastSegmentIsNotTakenForItsCheckpoint leaves the seal index a crash
// between sealing and starting the next segment leaves, then lets the segment grow: it is removed.
func TestASealIndexBesideTheLastSegmentIsNotTakenForItsCheckpoint(t *testing.T) {
	t.Parallel()
	dir, ck := checkpointed(t, "a")
	ck.checkpoint = false
	os.WriteFile(filepath.Join(dir, indexName(0)), ck.encode(), 0o644)
	segs := segmentsOf(t, dir)
	if read := startOf(t, dir, map[string]int64{"a": 4, "z": 1, "q": 1}); read != segs[0].size {
		t.Fatalf("the start read %d bytes of %d", read, segs[0].size)
	}
	if _, err := os.Stat(filepath.Join(dir, indexName(0))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the seal index beside the last segment is still there: %v", err)
	}
}

// TestACheckpointIsReplacedByTheSealIndexWhenItsSegmentIsSealed: a sealed segment's .idx is its
// seal index, never the checkpoint written while it grew.
func TestACheckpointIsReplacedByTheSealIndexWhenItsSegmentIsSealed(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(1000), WithCheckpointEvery(100))
	for i := range 30 {
		mustAppend(t, j, "r", runBatch("r", int64(3*i+1), 3, "w"))
	}
	segs := segmentsOf(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		b, err := os.ReadFile(filepath.Join(dir, indexName(s.base)))
		if err != nil {
			t.Fatal(err)
		}
		if si, err := parseSegIndex(b); err != nil || si.size != s.size {
			t.Fatalf("segment %d's index: %+v, %v", s.base, si, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, indexName(segs[len(segs)-1].base)))
	if err != nil {
		t.Fatalf("no checkpoint beside the last segment: %v", err)
	}
	if _, err := parseCheckpoint(b); err != nil {
		t.Fatal(err)
	}
}

// TestAnAppendWhoseCheckpointCannotBeWrittenSucceeds: the batch is durable before the checkpoint
// is tried, and a checkpoint is an aid; the next is tried an interval later and then written.
func TestAnAppendWhoseCheckpointCannotBeWrittenSucceeds(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithCheckpointEvery(200))
	// A directory where the checkpoint's temporary file goes: its create fails.
	block := filepath.Join(dir, indexName(0)+".tmp")
	if err := os.Mkdir(block, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(block, "keep"), nil, 0o644)
	mustAppend(t, j, "r", runBatch("r", 1, 6, "w"))
	if _, err := os.Stat(filepath.Join(dir, indexName(0))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a checkpoint was written through the blocked name: %v", err)
	}
	os.RemoveAll(block)
	mustAppend(t, j, "r", runBatch("r", 7, 6, "w"))
	b, err := os.ReadFile(filepath.Join(dir, indexName(0)))
	if err != nil {
		t.Fatalf("no checkpoint once its name was free: %v", err)
	}
	if ck, err := parseCheckpoint(b); err != nil || ck.size != segmentsOf(t, dir)[0].size {
		t.Fatalf("the checkpoint: %+v, %v", ck, err)
	}
}
