// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
)

// readJournal writes n lines of run a through a relay and returns the position after all of them.
func readJournal(t *testing.T, n int) (*relayJournal, FilePosition) {
	t.Helper()
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", n)
	jf := openTest(t, rj.path)
	_, p := readToEnd(t, jf, jf.start(), smallBatches)
	return rj, p
}

// A rotation by rename: the path names a new file; the old one is found in the directory by its
// device and inode, also with nothing open (a restart), and is read on from the position before the
// new one is read from its start.
func TestARotatedFileIsFoundByItsIdentityAndReadToItsEndFirst(t *testing.T) {
	rj, p := readJournal(t, 3)
	rj.add("a", 2) // not read yet
	rj.j.Close()
	if err := os.Rename(rj.path, rj.path+".1"); err != nil {
		t.Fatal(err)
	}
	rj.open()
	rj.add("b", 1)
	for _, open := range []bool{false, true} {
		var jf *journalFile
		if open {
			jf = openTest(t, rj.path+".1")
		}
		l, err := locate(rj.path, &p, jf, false, nil)
		if err != nil {
			t.Fatalf("open %v: %v", open, err)
		}
		if l.cur.name != rj.path+".1" && !open || l.pos.Offset != p.Offset || l.next == nil || l.next.name != rj.path {
			t.Fatalf("open %v: reading %s from %d, then %v", open, l.cur.name, l.pos.Offset, l.next)
		}
		lines, _ := readToEnd(t, l.cur, l.pos, smallBatches)
		if len(lines) != 2 {
			t.Fatalf("open %v: %d lines after the position in the rotated file, want 2", open, len(lines))
		}
		if !open {
			l.close()
		}
	}
}

// A copytruncate: the original is cut to nothing and a copy of it taken first. The copy is read on
// from the position (it holds the lines the cut took), then the cut file from its start.
func TestACopytruncateReadsTheCopyOnThenTheCutFileFromItsStart(t *testing.T) {
	rj, p := readJournal(t, 3)
	rj.add("a", 2)
	rj.j.Close()
	if err := os.WriteFile(rj.path+".1", readAllFile(t, rj.path), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(rj.path, 0); err != nil {
		t.Fatal(err)
	}
	l, err := locate(rj.path, &p, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if l.cur.name != rj.path+".1" || l.pos.Offset != p.Offset || l.next == nil || l.next.name != rj.path {
		t.Fatalf("reading %s from %d, then %v", l.cur.name, l.pos.Offset, l.next)
	}
}

// A truncation with no copy anywhere, or a file cut and regrown past its old size: read from the
// start, which deduplication makes safe.
func TestATruncatedFileIsReadFromItsStart(t *testing.T) {
	rj, p := readJournal(t, 3)
	rj.j.Close()
	content := readAllFile(t, rj.path)
	for name, b := range map[string][]byte{
		"cut":     content[:len(content)/2],
		"regrown": append(append([]byte{}, content[:len(content)/2]...), content...),
	} {
		if err := os.WriteFile(rj.path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := locate(rj.path, &p, nil, false, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if l.cur.name != rj.path || l.pos.Offset != 0 || l.next != nil {
			t.Fatalf("%s: reading %s from %d, then %v", name, l.cur.name, l.pos.Offset, l.next)
		}
		l.close()
	}
}

// The path names another file holding the same journal (replaced by a copy of itself): read from
// its start. The path names a file that is not the one read and that file is nowhere: ErrFileLost,
// naming it and how far it was read.
func TestAReplacedFileIsReadFromItsStartAndALostOneIsAnError(t *testing.T) {
	rj, p := readJournal(t, 3)
	rj.j.Close()
	content := readAllFile(t, rj.path)
	os.Remove(rj.path)
	os.WriteFile(rj.path, content, 0o644)
	l, err := locate(rj.path, &p, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.cur.name != rj.path || l.pos.Offset != 0 || l.next != nil {
		t.Fatalf("replaced by a copy: reading %s from %d, then %v", l.cur.name, l.pos.Offset, l.next)
	}
	l.close()

	os.Remove(rj.path)
	os.WriteFile(rj.path, []byte("{\"engine_run_id\":\"other\",\"seq\":1}\n"), 0o644)
	_, err = locate(rj.path, &p, nil, false, nil)
	if !errors.Is(err, ErrFileLost) || !strings.Contains(err.Error(), rj.path) || !strings.Contains(err.Error(), "read to byte") {
		t.Fatalf("the file read is gone: %v; want ErrFileLost naming it and how far", err)
	}
	// The path naming nothing is the same, once something was read.
	os.Remove(rj.path)
	if _, err = locate(rj.path, &p, nil, false, nil); !errors.Is(err, ErrFileLost) {
		t.Fatalf("the path names nothing: %v", err)
	}
	if _, err = locate(rj.path, nil, nil, false, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("nothing read, no file: %v; want fs.ErrNotExist", err)
	}
}

// An inode reused by another file is not the file read: its content is checked too.
func TestAReusedInodeIsNotTakenForTheFileRead(t *testing.T) {
	rj, p := readJournal(t, 3)
	rj.j.Close()
	other := rj.path + ".other"
	os.WriteFile(other, []byte("{\"engine_run_id\":\"x\",\"seq\":1}\n"), 0o644)
	st, _ := os.Stat(other)
	p.Device, p.Inode = fileID(st) // as if the journal's inode had gone to it
	os.Remove(rj.path)
	os.WriteFile(rj.path, []byte("{\"engine_run_id\":\"y\",\"seq\":1}\n"), 0o644)
	if _, err := locate(rj.path, &p, nil, false, nil); !errors.Is(err, ErrFileLost) {
		t.Fatalf("a reused inode: %v; want ErrFileLost", err)
	}
}

// A file that is not a journal is refused with the journal package's sentinel, and nothing is read
// of it.
func TestAFileThatIsNotAJournalIsErrNotJournal(t *testing.T) {
	path := journalPath(t)
	os.WriteFile(path, []byte("SQLite format 3\x00\x10\x00"), 0o644)
	if _, err := locate(path, nil, nil, false, nil); !errors.Is(err, journal.ErrNotJournal) {
		t.Fatalf("%v; want journal.ErrNotJournal", err)
	}
}
