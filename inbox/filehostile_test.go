// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// rewrite replaces the journal's content in place (same inode), as an editor or a truncation would.
func rewrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace puts b at path under a new inode (written beside it, then renamed over it).
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func appendRaw(t *testing.T, path string, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func (c *consumer) quarantine(run string) *Quarantine {
	c.t.Helper()
	qs, err := c.in.Quarantined(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, q := range qs {
		if q.RunID == run {
			return &q
		}
	}
	return nil
}

// A line removed from the journal: its run is quarantined as a gap at that seq, the lines after it
// are not applied, and the other run goes on.
func TestALineRemovedQuarantinesItsRunAsAGap(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	rj.add("b", 3)
	rj.j.Close()
	lines := fileLines(readAllFile(t, rj.path))
	rewrite(t, rj.path, append(bytes.Join(append(lines[:2:2], lines[3:]...), []byte{'\n'}), '\n'))
	c := newConsumer(t)
	rep := c.applyFile(rj.path)
	if rep != (Report{Applied: 5, Quarantined: 3}) {
		t.Fatalf("report %+v", rep)
	}
	if q := c.quarantine("a"); q == nil || q.Reason != "gap" || q.Expected != 3 || q.Got != 4 {
		t.Fatalf("quarantine %+v", q)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 2, "b": 3})
}

// A line applied and then found changed (the journal replaced by an edited copy, so read again from
// its start): its run is quarantined as a conflict, never applied twice.
func TestALineChangedQuarantinesItsRunAsAConflict(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 4)
	rj.add("b", 2)
	rj.j.Close()
	c := newConsumer(t)
	c.applyFile(rj.path)
	content := readAllFile(t, rj.path)
	lines := fileLines(content)
	edited := bytes.Replace(lines[1], []byte(`"cents":100`), []byte(`"cents":999`), 1)
	replace(t, rj.path, bytes.Replace(content, lines[1], edited, 1))
	rep := c.applyFile(rj.path)
	if rep != (Report{Duplicates: 3, Quarantined: 3}) {
		t.Fatalf("report %+v", rep)
	}
	if q := c.quarantine("a"); q == nil || q.Reason != "conflict" || q.Got != 2 {
		t.Fatalf("quarantine %+v", q)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 2})
}

// A torn tail (a line the writer has not finished, or will cut at its next open) is not applied;
// once its newline comes it is, once.
func TestATornTailIsAppliedOnlyOnceItsNewlineComes(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 2)
	rj.j.Close()
	appendRaw(t, rj.path, `{"engine_run_id":"t","seq":1`)
	c := newConsumer(t)
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2}) {
		t.Fatalf("with a torn tail: %+v", rep)
	}
	appendRaw(t, rj.path, "}\n")
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 1}) {
		t.Fatalf("once its newline came: %+v", rep)
	}
	// The writer cuts a torn tail at its next open; the source never took it.
	appendRaw(t, rj.path, `{"engine_run_id":"t","seq":2,"cut`)
	if rep := c.applyFile(rj.path); rep != (Report{}) {
		t.Fatalf("a second torn tail: %+v", rep)
	}
	rj.open()
	rj.add("a", 2)
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2}) {
		t.Fatalf("after the writer cut the tail: %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "t": 1})
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

// Run ids that an attacker would choose are each a run of their own, exactly as the journal keys
// them; a lone surrogate, which decoders turn into U+FFFD, stops the call as malformed, naming where
// the line is, with the lines before it applied.
func TestHostileRunIdsAreKeptApartAndALoneSurrogateStopsTheCall(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "a ", "A", "a\u0000", "a\n", "\u202ea", "\xef\xbf\xbd", strings.Repeat("r", 4000)}
	for _, id := range ids {
		line, _ := journal.Builder(id, "unit", nil)(1)
		if err := j.Append(context.Background(), id, []outbox.EventLine{{Seq: 1, Line: line}}); err != nil {
			t.Fatalf("append %q: %v", id, err)
		}
	}
	j.Close()
	size := len(readAllFile(t, path))
	// A good line after it, or the file is not a journal at all (its last line is checked).
	appendRaw(t, path, `{"engine_run_id":"\ud800","seq":1}`+"\n"+`{"engine_run_id":"z","seq":1}`+"\n")
	c := newConsumer(t)
	seen := map[string]bool{}
	rep, err := c.in.ApplyFile(context.Background(), path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		seen[ev.RunID] = true
		return record(ctx, tx, ev)
	})
	if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", size)) {
		t.Fatalf("%v; want journal.ErrMalformed naming byte %d", err, size)
	}
	if rep.Applied != len(ids) || len(seen) != len(ids) {
		t.Fatalf("report %+v, %d runs seen; want %d runs applied", rep, len(seen), len(ids))
	}
}

// A line over the limit stops the call with journal.ErrMalformed naming where it is; the lines
// before it are applied with their position, and the call stops there again next time.
func TestALineOverTheLimitStopsTheCallWhereItIs(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	appendDirect(t, j, "a", 1, 2)
	long := fmt.Sprintf(`{"engine_run_id":"a","seq":3,"pad":%q}`, strings.Repeat("x", 300))
	if err := j.Append(context.Background(), "a", []outbox.EventLine{{Seq: 3, Line: []byte(long)}}); err != nil {
		t.Fatal(err)
	}
	appendDirect(t, j, "a", 4, 2)
	j.Close()
	before := len(fileLines(readAllFile(t, path))[0]) + len(fileLines(readAllFile(t, path))[1]) + 2
	c := newConsumer(t, WithMaxLineSize(200))
	for range 2 {
		rep, err := c.in.ApplyFile(context.Background(), path, record)
		if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", before)) {
			t.Fatalf("%v; want journal.ErrMalformed at byte %d", err, before)
		}
		if p := c.position(path); p == nil || p.Offset != int64(before) {
			t.Fatalf("position %+v, want at %d", p, before)
		}
		_ = rep
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 2})
}

// Lines ending in "\r\n" are journal lines for journal.Verify; the handler gets them with their
// '\r', exactly the bytes before the newline.
func TestCRLFLinesAreAppliedWithTheirCarriageReturn(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		line := fmt.Appendf(nil, "{\"engine_run_id\":\"a\",\"seq\":%d}\r", seq)
		if err := j.Append(context.Background(), "a", []outbox.EventLine{{Seq: seq, Line: line}}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	c := newConsumer(t)
	var got [][]byte
	rep, err := c.in.ApplyFile(context.Background(), path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		got = append(got, ev.Line)
		return record(ctx, tx, ev)
	})
	if err != nil || rep.Applied != 3 {
		t.Fatalf("%+v, %v", rep, err)
	}
	if want := fileLines(readAllFile(t, path)); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) || !bytes.HasSuffix(got[0], []byte("\r")) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}

// Lines of two runs interleaved in the journal: each run's lines are applied in seq order, each
// once.
func TestTwoRunsInterleavedAreEachAppliedInOrder(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	for range 5 {
		rj.add("a", 3)
		rj.add("b", 2)
	}
	c := newConsumer(t, WithBatchLines(4))
	last := map[string]int64{}
	rep, err := c.in.ApplyFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.Seq != last[ev.RunID]+1 {
			return fmt.Errorf("run %s: seq %d after %d", ev.RunID, ev.Seq, last[ev.RunID])
		}
		last[ev.RunID] = ev.Seq
		return record(ctx, tx, ev)
	})
	if err != nil || rep.Applied != 25 {
		t.Fatalf("%+v, %v", rep, err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 15, "b": 10})
}
