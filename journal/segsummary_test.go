// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// summarizedJournal writes 40 batches of three lines of run "r" into 500-byte segments, the summary
// written every four seals, and returns the summary's records as it left them.
func summarizedJournal(t *testing.T, dir string) map[int64]summaryRecord {
	t.Helper()
	j, err := Open(dir, WithSegmentSize(500), withSummaryEvery(4))
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(40) {
		mustAppend(t, j, "r", runBatch("r", 3*i+1, 3, strings.Repeat("w", 40)))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return readSummaryFile(t, dir)
}

func readSummaryFile(t *testing.T, dir string) map[int64]summaryRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, summaryName))
	if err != nil {
		t.Fatalf("no seal summary: %v", err)
	}
	recs, err := parseSummary(b)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// removeSummarizedIndexes removes the index file of every segment the summary holds a record of.
func removeSummarizedIndexes(t *testing.T, dir string, recs map[int64]summaryRecord) {
	t.Helper()
	for base := range recs {
		if err := os.Remove(filepath.Join(dir, indexName(base))); err != nil {
			t.Fatal(err)
		}
	}
}

// indexFilesOf counts the index files of the segments the summary holds a record of.
func indexFilesOf(dir string, recs map[int64]summaryRecord) int {
	n := 0
	for base := range recs {
		if _, err := os.Stat(filepath.Join(dir, indexName(base))); err == nil {
			n++
		}
	}
	return n
}

// startChecks opens dir and checks that it holds run "r" up to 120, that a re-delivery of a batch
// from its first segment is taken (compared byte for byte with its copy there), and that one with
// other bytes is refused.
func startChecks(t *testing.T, dir string) {
	t.Helper()
	j, err := Open(dir, WithSegmentSize(500), withSummaryEvery(4))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if last, err := j.LastSeq("r"); err != nil || last != 120 {
		t.Fatalf("LastSeq = %d, %v; want 120", last, err)
	}
	if err := j.Append(context.Background(), "r", runBatch("r", 4, 3, strings.Repeat("w", 40))); err != nil {
		t.Fatalf("a re-delivery of seqs 4 to 6: %v", err)
	}
	if err := j.Append(context.Background(), "r", runBatch("r", 4, 3, strings.Repeat("v", 40))); err == nil {
		t.Fatal("a re-delivery of seqs 4 to 6 with other bytes was taken")
	}
}

func TestAStartReadsTheSealSummaryInsteadOfAnIndexFilePerSegment(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	recs := summarizedJournal(t, dir)
	if len(recs) < 12 {
		t.Fatalf("the summary holds %d segments' records", len(recs))
	}
	// Without their index files, a start that read them would rebuild each from its segment and
	// write it again.
	removeSummarizedIndexes(t, dir, recs)
	startChecks(t, dir)
	if n := indexFilesOf(dir, recs); n != 0 {
		t.Fatalf("the start read %d segments the summary holds whole, and wrote their indexes again", n)
	}
}

func TestASealSummaryIsNotTrustedInACopyOfTheDirectory(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir, cp := filepath.Join(root, "j"), filepath.Join(root, "copy")
	recs := summarizedJournal(t, dir)
	// A copy that keeps neither the times nor the files: its segments are other files, whose own
	// indexes (here removed) are rebuilt from them.
	if err := os.Mkdir(cp, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cp, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removeSummarizedIndexes(t, cp, recs)
	startChecks(t, cp)
	if n := indexFilesOf(cp, recs); n != len(recs) {
		t.Fatalf("the copy's start rebuilt %d of the %d indexes the original's summary holds", n, len(recs))
	}
	// And it wrote a summary of its own files, which the next start trusts.
	removeSummarizedIndexes(t, cp, readSummaryFile(t, cp))
	startChecks(t, cp)
}

func TestASealSummaryIsNotTrustedForASegmentRewrittenInPlace(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	recs := summarizedJournal(t, dir)
	// The first segment rewritten by another program with other lines of the same size: the same
	// file, another modification time. Its index is then read from the segment itself.
	first := filepath.Join(dir, segmentName(0))
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(first, bytes.ReplaceAll(b, []byte(strings.Repeat("w", 40)), []byte(strings.Repeat("v", 40))), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := recs[0]; !ok {
		t.Fatal("the summary holds no record of the first segment")
	}
	j := openDir(t, dir, WithSegmentSize(500), withSummaryEvery(4))
	if err := j.Append(context.Background(), "r", runBatch("r", 4, 3, strings.Repeat("v", 40))); err != nil {
		t.Fatalf("a re-delivery matching the segment as it is now: %v", err)
	}
	if err := j.Append(context.Background(), "r", runBatch("r", 4, 3, strings.Repeat("w", 40))); err == nil {
		t.Fatal("a re-delivery matching the summary's stale record, not the segment, was taken")
	}
}

func TestATornOrCorruptSealSummaryIsIgnoredAndWrittenAgain(t *testing.T) {
	t.Parallel()
	for name, spoil := range map[string]func([]byte) []byte{
		"torn":       func(b []byte) []byte { return b[:len(b)/2] },
		"corrupt":    func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"empty":      func([]byte) []byte { return nil },
		"checkpoint": func(b []byte) []byte { return append([]byte(checkpointMagic), b[len(summaryMagic):]...) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "j")
			recs := summarizedJournal(t, dir)
			path := filepath.Join(dir, summaryName)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, spoil(b), 0o644); err != nil {
				t.Fatal(err)
			}
			startChecks(t, dir)
			if got := readSummaryFile(t, dir); len(got) < len(recs) {
				t.Fatalf("the start wrote a summary of %d segments, the spoilt one held %d", len(got), len(recs))
			}
		})
	}
}
