// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAReaderRegisteredInAJournalDirectoryIsListedWithItsPosition(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(200))
	for i := range 5 {
		mustAppend(t, j, "r", runBatch("r", int64(3*i+1), 3, "x"))
	}
	before := time.Now().Add(-time.Second)
	for _, r := range []struct {
		name string
		pos  int64
	}{{"zeta", 40}, {"alpha.inbox_1-a", 7}, {"zeta", 12}} {
		if err := SetReader(dir, r.name, r.pos); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Readers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "alpha.inbox_1-a" || got[0].Position != 7 || got[1].Name != "zeta" || got[1].Position != 12 {
		t.Fatalf("readers: %+v", got)
	}
	if got[1].Updated.Before(before) {
		t.Fatalf("updated %v", got[1].Updated)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(tmp) > 0 {
		t.Fatalf("SetReader left %v", tmp)
	}
	// The journal opens beside the readers' files, and appends on.
	j.Close()
	j = openDir(t, dir, WithSegmentSize(200))
	mustAppend(t, j, "r", runBatch("r", 16, 3, "x"))
}

func TestABadReaderNameIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"", ".", "..", ".hidden", "a/b", "../x", "a\x00b", "a\nb", "tab\tx", "caf\xc3\xa9", "bad\xff",
		"sp ace", strings.Repeat("n", 65), "a\\b"} {
		if err := SetReader(dir, name, 1); !errors.Is(err, ErrReaderName) {
			t.Errorf("SetReader(%q): %v, want ErrReaderName", name, err)
		}
		if err := RemoveReader(dir, name, true); !errors.Is(err, ErrReaderName) {
			t.Errorf("RemoveReader(%q): %v, want ErrReaderName", name, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("bad names left %v", ents)
	}
	if err := SetReader(dir, strings.Repeat("n", 64), 1); err != nil {
		t.Fatalf("a 64-byte name: %v", err)
	}
}

func TestATornOrForeignReaderFileIsAnErrorNamingItNeverPositionZero(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := SetReader(dir, "inbox", 12345); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "inbox.reader")
	good, _ := os.ReadFile(path)
	other := filepath.Join(t.TempDir(), "x")
	if err := SetReader(filepath.Dir(other), "other", 12345); err != nil {
		t.Fatal(err)
	}
	foreign, _ := os.ReadFile(filepath.Join(filepath.Dir(other), "other.reader"))
	flipped := append([]byte(nil), good...)
	flipped[len("outbox journal reader 1 inbox ")] ^= 1
	for what, b := range map[string][]byte{
		"empty":            nil,
		"torn":             good[:len(good)/2],
		"no newline":       good[:len(good)-1],
		"a bit flipped":    flipped,
		"another reader's": foreign,
		"garbage":          []byte("12345\n"),
		"twice":            append(append([]byte(nil), good...), good...),
	} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rs, err := Readers(dir)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Readers = %+v, %v; want an error naming %s", what, rs, err, path)
		}
	}
}

func TestRemovingAReaderThatHasNotReadTheWholeJournalNeedsForce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(200))
	for i := range 5 {
		mustAppend(t, j, "r", runBatch("r", int64(3*i+1), 3, "x"))
	}
	end, err := journalEnd(dir)
	if err != nil || end == 0 {
		t.Fatal(end, err)
	}
	if err := SetReader(dir, "slow", end-1); err != nil {
		t.Fatal(err)
	}
	if err := SetReader(dir, "done", end); err != nil {
		t.Fatal(err)
	}
	if err := RemoveReader(dir, "slow", false); !errors.Is(err, ErrReaderBehind) {
		t.Fatalf("removing a reader 1 byte behind: %v", err)
	}
	if err := RemoveReader(dir, "done", false); err != nil {
		t.Fatal(err)
	}
	if err := RemoveReader(dir, "slow", true); err != nil {
		t.Fatal(err)
	}
	if err := RemoveReader(dir, "slow", true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removing a reader twice: %v", err)
	}
	if rs, err := Readers(dir); err != nil || len(rs) != 0 {
		t.Fatalf("readers left: %+v, %v", rs, err)
	}
}

func TestAForcedRemoveTakesAwayATornReaderFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gone.reader"), []byte("outbox journal"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveReader(dir, "gone", false); err == nil {
		t.Fatal("a torn reader file was removed without force")
	}
	if err := RemoveReader(dir, "gone", true); err != nil {
		t.Fatal(err)
	}
}

func TestAJournalOpensBesideReaderFilesButRefusesOtherFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A reader registered before the journal's first segment exists.
	if err := SetReader(dir, "early", 0); err != nil {
		t.Fatal(err)
	}
	// A reader write under way in another process, and an old one a crash left.
	fresh := filepath.Join(dir, "early.reader.tmp.123")
	stale := filepath.Join(dir, "early.reader.tmp.456")
	for _, p := range []string{fresh, stale} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, "r", runBatch("r", 1, 3, "x"))
	j.Close()
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("Open removed a reader's write under way: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open left a reader's temporary file a crash left: %v", err)
	}
	for _, name := range []string{".hidden.reader", "a b.reader", "x.reader.tmp.", "x.reader.tmp.12a", "x.readers", ".reader"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if j, err := Open(dir); !errors.Is(err, ErrNotJournal) {
			if j != nil {
				j.Close()
			}
			t.Errorf("Open beside %q: %v, want ErrNotJournal", name, err)
		}
		os.Remove(p)
	}
}

func TestStatusAndTrimOfADirectoryThatIsNoJournalSayNotAJournalNotNoSegmentsYet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "notes.txt")
	for _, path := range []string{dir, file} {
		if st, err := Status(t.Context(), path); !errors.Is(err, ErrNotJournal) {
			t.Errorf("Status(%s) = %+v, %v; want ErrNotJournal", path, st, err)
		}
		if rep, err := Trim(t.Context(), path); !errors.Is(err, ErrNotJournal) {
			t.Errorf("Trim(%s) = %+v, %v; want ErrNotJournal", path, rep, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want notes.txt alone", len(ents))
	}
	// A journal's own files, an empty directory among them, are still reported.
	j := filepath.Join(t.TempDir(), "j")
	if err := os.Mkdir(j, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := SetReader(j, "r", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Status(t.Context(), j); err != nil {
		t.Errorf("Status of a directory holding a reader's file: %v", err)
	}
}
