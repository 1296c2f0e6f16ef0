// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/textmachine/outbox/internal/testing/smallfs"
)

// TestAnAppendOnARealFullDiskIsENOSPCAndLeavesNoHalfLine appends, on a real small file system that is
// full, a batch larger than what the file's last block still holds, so that part of it is written
// before the disk refuses the rest: Append says ENOSPC, the file holds exactly what it held before,
// and once space is back the same batch is appended whole.
func TestAnAppendOnARealFullDiskIsENOSPCAndLeavesNoHalfLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := smallfs.Mount(t)
	path := filepath.Join(dir, "journal.jsonl")
	j, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(ctx, "r", batch(1, "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	words := make([]string, 200)
	for i := range words {
		words[i] = strings.Repeat("w", 40)
	}
	free := smallfs.Fill(t, dir)
	if err := j.Append(ctx, "r", batch(4, words...)); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Append on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
		t.Errorf("the journal after the refused append: %d bytes (%v), want the %d it held before", len(after), err, len(before))
	}
	free()
	if err := j.Append(ctx, "r", batch(4, words...)); err != nil {
		t.Fatalf("Append once space is back: %v", err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != string(before)+text(4, words...) {
		t.Errorf("the journal once space is back: %d bytes (%v), want the first batch and the second whole", len(got), err)
	}
}

// TestARollOnARealFullDiskIsENOSPCAndLeavesTheJournalAsItWas appends, on a real small file system
// that is full, batches that each need the last segment sealed and a new one started: every Append
// says ENOSPC and leaves no half line, no index's temporary file and no new segment; once space is
// back the same batch goes on, and a reopen finds every acknowledged line.
func TestARollOnARealFullDiskIsENOSPCAndLeavesTheJournalAsItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(smallfs.Mount(t), "j")
	size := int64(2 * (len(runLine("r", 1, "w").Line) + 1))
	j, err := Open(dir, WithSegmentSize(size))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	first := runBatch("r", 1, 2, "w")
	if err := j.Append(ctx, "r", first); err != nil {
		t.Fatal(err)
	}
	free := smallfs.Fill(t, filepath.Dir(dir))
	for range 3 {
		if err := j.Append(ctx, "r", runBatch("r", 3, 2, "w")); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("an Append that rolls on a full disk: %v, want errors.Is syscall.ENOSPC", err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != segmentName(0) && e.Name() != indexName(0) {
			t.Errorf("the refused rolls left %s behind", e.Name())
		}
	}
	if got := string(catDir(t, dir)); got != linesText(first) {
		t.Errorf("the journal after the refused rolls: %q, want %q", got, linesText(first))
	}
	free()
	second := runBatch("r", 3, 2, "w")
	if err := j.Append(ctx, "r", second); err != nil {
		t.Fatalf("Append once space is back: %v", err)
	}
	j.Close()
	j = openDir(t, dir, WithSegmentSize(size))
	if last, err := j.LastSeq("r"); err != nil || last != 4 {
		t.Fatalf("LastSeq after a reopen: %d, %v; want 4", last, err)
	}
	if got := string(catDir(t, dir)); got != linesText(first)+linesText(second) {
		t.Errorf("the journal: %q, want both batches", got)
	}
	segmentsOf(t, dir)
}
