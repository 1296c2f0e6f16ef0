// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/smallfs"
)

// singleFile writes a single-file journal of runs "x" (1–2) and "r" (1–6).
func singleFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, b := range []struct {
		run  string
		from int64
		n    int
	}{{"x", 1, 2}, {"r", 1, 3}, {"r", 4, 3}} {
		if err := f.Append(ctx, b.run, runBatch(b.run, b.from, b.n, "w")); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	return path
}

func TestAdoptMakesTheFileTheFirstSegmentSealedWithItsIndex(t *testing.T) {
	t.Parallel()
	path := singleFile(t)
	before, _ := os.Stat(path)
	content, _ := os.ReadFile(path)
	dir := filepath.Join(t.TempDir(), "j")
	if err := Adopt(context.Background(), path, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file is still at its path: %v", err)
	}
	first, err := os.Stat(filepath.Join(dir, segmentName(0)))
	if err != nil || !os.SameFile(before, first) {
		t.Fatalf("the first segment is not the file, moved: %v", err)
	}
	if string(catDir(t, dir)) != string(content) {
		t.Fatal("the journal's bytes changed")
	}
	for _, name := range []string{indexName(0), segmentName(int64(len(content)))} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	j := openDir(t, dir)
	for run, want := range map[string]int64{"x": 2, "r": 6} {
		if got, err := j.LastSeq(run); err != nil || got != want {
			t.Errorf("LastSeq(%q) = %d, %v; want %d", run, got, err, want)
		}
	}
	if j.read != 0 {
		t.Fatalf("the first start after Adopt read %d bytes of lines", j.read)
	}
	if err := j.Append(context.Background(), "x", runBatch("x", 2, 1, "other")); !errors.Is(err, ErrPayloadConflict) {
		t.Fatalf("a re-delivery with other bytes against the adopted lines: %v", err)
	}
	mustAppend(t, j, "r", runBatch("r", 5, 3, "w"))
}

func TestAdoptOfAnEmptyFileLeavesItTheSegmentAppendedTo(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	os.WriteFile(path, nil, 0o644)
	dir := filepath.Join(t.TempDir(), "j")
	if err := Adopt(context.Background(), path, dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != segmentName(0) {
		t.Fatalf("the directory holds %v", ents)
	}
	mustAppend(t, openDir(t, dir), "r", runBatch("r", 1, 1, "w"))
}

func TestAdoptRefusesADirectoryThatHoldsSegmentsAndChangesNothing(t *testing.T) {
	t.Parallel()
	path := singleFile(t)
	content, _ := os.ReadFile(path)
	dir := sealedJournal(t)
	before := catDir(t, dir)
	if err := Adopt(context.Background(), path, dir); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Adopt into a journal: %v, want ErrNotEmpty", err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(content) || string(catDir(t, dir)) != string(before) {
		t.Fatal("the refused Adopt changed something")
	}
}

func TestAdoptRefusesAFileThatIsNotAJournalOrIsOpenAndLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	notJournal := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notJournal, []byte("hello\n"), 0o644)
	dir := filepath.Join(t.TempDir(), "j")
	if err := Adopt(context.Background(), notJournal, dir); !errors.Is(err, ErrNotJournal) {
		t.Fatalf("Adopt of a text file: %v, want ErrNotJournal", err)
	}
	path := singleFile(t)
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Adopt(context.Background(), path, dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Adopt of a journal another writer has open: %v, want ErrLocked", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Adopt left %s behind", dir)
	}
}

func TestAdoptStoppedByItsContextChangesNothing(t *testing.T) {
	t.Parallel()
	path := singleFile(t)
	dir := filepath.Join(t.TempDir(), "j")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Adopt(ctx, path, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("Adopt with its context done: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stopped Adopt left %s behind", dir)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the stopped Adopt moved the file: %v", err)
	}
}

func TestAdoptRefusesASymbolicLinkAndChangesNothing(t *testing.T) {
	t.Parallel()
	path := singleFile(t)
	link := filepath.Join(t.TempDir(), "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "j")
	// Moving the link would leave a first segment that is no regular file, which Open refuses.
	if err := Adopt(context.Background(), link, dir); !errors.Is(err, ErrNotJournal) {
		t.Fatalf("Adopt of a symbolic link: %v, want ErrNotJournal", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Adopt left %s behind", dir)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the refused Adopt moved the link: %v", err)
	}
}

func TestAdoptOfAMissingFileIsRefusedAndCreatesNothing(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.jsonl")
	dir := filepath.Join(t.TempDir(), "j")
	if err := Adopt(context.Background(), missing, dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Adopt of a missing file: %v, want os.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Adopt created %s", missing)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Adopt left %s behind", dir)
	}
}

func TestAdoptAcrossFileSystemsIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(smallfs.Mount(t), "j.jsonl")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Append(context.Background(), "r", runBatch("r", 1, 3, "w")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "j")
	empty := t.TempDir()
	for _, dir := range []string{missing, empty} {
		if err := Adopt(context.Background(), path, dir); err == nil || !strings.Contains(err.Error(), "different file systems") {
			t.Fatalf("Adopt into %s on another file system: %v, want a refusal naming the file systems", dir, err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused Adopt left %s behind", missing)
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Errorf("the refused Adopt left %d files in %s (%v)", len(ents), empty, err)
	}
	if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
		t.Errorf("the refused Adopt changed the file: %v", err)
	}
}

// TestAnAdoptThatFailsAfterTheMoveSaysWhereTheFileIsNow fills a real small file system after the
// file is written: the rename needs no space, the index does. The error must say that the file was
// moved (a refusal says nothing was changed), and the directory is a journal with every line.
func TestAnAdoptThatFailsAfterTheMoveSaysWhereTheFileIsNow(t *testing.T) {
	t.Parallel()
	small := smallfs.Mount(t)
	path := filepath.Join(small, "j.jsonl")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Append(context.Background(), "r", runBatch("r", 1, 3, "w")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dir := filepath.Join(small, "j")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	free := smallfs.Fill(t, small)
	err = Adopt(context.Background(), path, dir)
	free()
	first := filepath.Join(dir, segmentName(0))
	if err == nil || !strings.Contains(err.Error(), "was moved to "+first) {
		t.Fatalf("Adopt failing after the move on a full disk: %v, want an error saying the file was moved to %s", err, first)
	}
	j := openDir(t, dir)
	if last, err := j.LastSeq("r"); err != nil || last != 3 {
		t.Fatalf("the adopted journal: LastSeq %d, %v; want 3", last, err)
	}
}

func TestAdoptRefusesAFileWithAnotherNameAndChangesNothing(t *testing.T) {
	t.Parallel()
	path := singleFile(t)
	other := filepath.Join(t.TempDir(), "other.jsonl")
	if err := os.Link(path, other); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	dir := filepath.Join(t.TempDir(), "j")
	if err := Adopt(context.Background(), path, dir); err == nil || !strings.Contains(err.Error(), "hard link") {
		t.Fatalf("Adopt of a file with two names: %v, want a refusal naming the hard link", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Adopt left %s behind", dir)
	}
	if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
		t.Fatalf("the refused Adopt moved or changed the file: %v", err)
	}
	// With one name again, it is adopted.
	os.Remove(other)
	if err := Adopt(context.Background(), path, dir); err != nil {
		t.Fatal(err)
	}
}

// writeBehindAdopt makes the fault point at write a line to the file through w, as a program that
// appends without taking the file's lock does, then runs Adopt.
func writeBehindAdopt(t *testing.T, at string) (path, dir string, err error) {
	t.Helper()
	path = singleFile(t)
	dir = filepath.Join(t.TempDir(), "j")
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	faultpoint.Set(func(point string) {
		if point == at {
			w.WriteString(linesText(runBatch("r", 7, 1, "behind")))
		}
	})
	defer faultpoint.Set(nil)
	return path, dir, Adopt(context.Background(), path, dir)
}

// TestAdoptRefusesAFileAnotherProgramWritesToWhileItIsRead: not parallel, it installs the
// process-wide fault hook.
func TestAdoptRefusesAFileAnotherProgramWritesToWhileItIsRead(t *testing.T) {
	path, dir, err := writeBehindAdopt(t, faultAdoptRead)
	if err == nil || !strings.Contains(err.Error(), "changed while it was adopted") {
		t.Fatalf("Adopt of a file written to while it was read: %v, want a refusal", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Adopt left %s behind", dir)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if last, err := f.LastSeq("r"); err != nil || last != 7 {
		t.Fatalf("the file at its path holds r up to %d (%v), want 7 with the line written beside Adopt", last, err)
	}
}

// TestAdoptPutsBackAFileAnotherProgramWroteToOnceItWasMoved: not parallel, it installs the
// process-wide fault hook.
func TestAdoptPutsBackAFileAnotherProgramWroteToOnceItWasMoved(t *testing.T) {
	path, dir, err := writeBehindAdopt(t, faultAdoptSealed)
	if err == nil || !strings.Contains(err.Error(), "changed while it was adopted") {
		t.Fatalf("Adopt of a file written to once it was moved: %v, want a refusal", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Adopt left %s behind", dir)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatalf("the file is not back at its path: %v", err)
	}
	defer f.Close()
	if last, err := f.LastSeq("r"); err != nil || last != 7 {
		t.Fatalf("the file at its path holds r up to %d (%v), want 7", last, err)
	}
}
