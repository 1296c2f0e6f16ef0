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

	"github.com/textmachine/outbox/internal/smallfs"
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
