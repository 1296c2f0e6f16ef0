// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// A truncation (the journal cut to nothing and written again by the next run): read again from its
// start, the new run's lines all applied.
func TestATruncatedJournalIsReadAgainFromItsStart(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 5)
	c := newConsumer(t)
	c.applyFile(rj.path)
	rj.j.Close()
	rewrite(t, rj.path, nil)
	rj.open()
	rj.add("b", 2)
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2}) {
		t.Fatalf("after the truncation: %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 5, "b": 2})
}

// A journal cut past its fingerprint's bytes and written again past its old size: the offset falls
// inside other lines, the line recorded there is not the one found, and the file is read again from
// its start, so none of the new lines is skipped.
func TestATruncateAndRegrowPastTheOldSizeIsReadAgainFromItsStart(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 60)
	c := newConsumer(t)
	c.applyFile(rj.path)
	rj.j.Close()
	content := readAllFile(t, rj.path)
	keep := bytes.IndexByte(content[fingerprintSize:], '\n') + fingerprintSize + 1
	rewrite(t, rj.path, content[:keep])
	rj.open()
	for int64(len(readAllFile(t, rj.path))) <= int64(len(content))+200 {
		rj.add("b", 10)
	}
	rep := c.applyFile(rj.path)
	_, lastB, _ := journal.LineKey(fileLines(readAllFile(t, rj.path))[len(fileLines(readAllFile(t, rj.path)))-1])
	if rep.Applied != int(lastB) || rep.Quarantined != 0 {
		t.Fatalf("after the regrowth: %+v, want all %d lines of b applied", rep, lastB)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 60, "b": lastB})
}

// A copytruncate under a writer that goes on at its old offset leaves NUL bytes where the journal
// was: not a journal (journal.ErrNotJournal), and nothing more is applied.
func TestATruncationThatLeftNULBytesIsErrNotJournal(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 3)
	c := newConsumer(t)
	c.applyFile(rj.path)
	rj.j.Close()
	size := len(readAllFile(t, rj.path))
	rewrite(t, rj.path, append(make([]byte, size+10), []byte("{\"engine_run_id\":\"b\",\"seq\":1}\n")...))
	rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
	if !errors.Is(err, journal.ErrNotJournal) || rep != (Report{}) {
		t.Fatalf("%+v, %v; want journal.ErrNotJournal", rep, err)
	}
}

// A copytruncate (the journal copied to journal.jsonl.1, then cut to nothing): the lines the cut
// took before the source read them are read from the copy, then the cut journal from its start.
func TestACopytruncateLosesNoLine(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 3)
	c := newConsumer(t)
	c.applyFile(rj.path)
	rj.add("a", 4) // not read before the copytruncate
	rj.j.Close()
	if err := os.WriteFile(rj.path+".1", readAllFile(t, rj.path), 0o644); err != nil {
		t.Fatal(err)
	}
	rewrite(t, rj.path, nil)
	rj.open()
	rj.add("b", 2)
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 6}) {
		t.Fatalf("after the copytruncate: %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 7, "b": 2})
	if rep := c.applyFile(rj.path); rep != (Report{}) {
		t.Fatalf("again: %+v", rep)
	}
}

// A rotation by rename: the old file is read to its end (found by its identity as journal.jsonl.1,
// also by the next process), then the new one from its start.
func TestARotationByRenameReadsTheOldFileToItsEndThenTheNewOne(t *testing.T) {
	for _, restart := range []bool{false, true} {
		rj := newRelayJournal(t, journalPath(t))
		rj.add("a", 3)
		c := newConsumer(t)
		c.applyFile(rj.path)
		rj.add("a", 4)
		rj.j.Close()
		if err := os.Rename(rj.path, rj.path+".1"); err != nil {
			t.Fatal(err)
		}
		rj.open()
		rj.add("b", 2)
		if restart {
			c.reopen()
		}
		if rep := c.applyFile(rj.path); rep != (Report{Applied: 6}) {
			t.Fatalf("restart %v: %+v", restart, rep)
		}
		wantApplied(t, c.applied(), map[string]int64{"a": 7, "b": 2})
		// The switch is stored: the old file is not needed again.
		os.Remove(rj.path + ".1")
		rj.add("b", 1)
		if rep := c.applyFile(rj.path); rep != (Report{Applied: 1}) {
			t.Fatalf("restart %v, with the old file deleted: %+v", restart, rep)
		}
	}
}

// A rotation whose old file is gone before its last lines were read stops the call with
// ErrFileLost, naming the file and how far it was read; nothing of the new file is applied.
func TestARotatedFileThatCannotBeFoundStopsWithAnErrorNamingIt(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 3)
	c := newConsumer(t)
	c.applyFile(rj.path)
	read := c.position(rj.path).Offset
	rj.add("a", 2)
	rj.j.Close()
	// Renamed away and deleted once the new file exists, so that the new file cannot get its inode.
	os.Rename(rj.path, rj.path+".old")
	rj.open()
	rj.add("b", 2)
	os.Remove(rj.path + ".old")
	rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
	if !errors.Is(err, ErrFileLost) || !strings.Contains(err.Error(), rj.path) || !strings.Contains(err.Error(), fmt.Sprintf("read to byte %d", read)) {
		t.Fatalf("%v; want ErrFileLost naming the file and byte %d", err, read)
	}
	if rep != (Report{}) {
		t.Fatalf("report %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 3})
}

// ForgetFile is the way past ErrFileLost: the position is given up, the new file read from its start;
// the lost lines are not pretended to be there.
func TestForgetFileGivesUpTheLostFilesPosition(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 3)
	c := newConsumer(t)
	c.applyFile(rj.path)
	rj.j.Close()
	os.Rename(rj.path, rj.path+".old")
	rj.open()
	rj.add("b", 2)
	os.Remove(rj.path + ".old")
	if _, err := c.in.ApplyFile(context.Background(), rj.path, record); !errors.Is(err, ErrFileLost) {
		t.Fatalf("%v, want ErrFileLost", err)
	}
	if err := c.in.ForgetFile(context.Background(), rj.path); err != nil {
		t.Fatal(err)
	}
	if c.position(rj.path) != nil {
		t.Fatal("the position is still stored")
	}
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2}) {
		t.Fatalf("after ForgetFile: %+v", rep)
	}
	if err := c.in.ForgetFile(context.Background(), journalPath(t)); err != nil {
		t.Fatalf("a path never read: %v", err)
	}
}

// A journal replaced by another file holding it (restored, or copied over): read again from its
// start, what was applied counted as duplicates, the rest applied.
func TestAReplacedJournalIsReadAgainFromItsStart(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 3)
	c := newConsumer(t)
	c.applyFile(rj.path)
	rj.add("a", 2)
	rj.j.Close()
	replace(t, rj.path, readAllFile(t, rj.path))
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2, Duplicates: 3}) {
		t.Fatalf("after the replacement: %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 5})
}
