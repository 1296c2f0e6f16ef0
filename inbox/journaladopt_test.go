// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/journal"
)

func TestAnInboxThatReadAFileGoesOnFromWhereItWasOnceTheFileIsAdoptedAsASegmentedJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tmp := t.TempDir()
	file := filepath.Join(tmp, "journal.jsonl")
	f, err := journal.OpenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	appendDirect(t, f, "a", 1, 40)
	c := newConsumer(t)
	if rep, err := c.in.ApplyFile(ctx, file, record); err != nil || rep.Applied != 40 {
		t.Fatalf("ApplyFile: %+v, %v", rep, err)
	}
	appendDirect(t, f, "a", 41, 10) // written after the inbox's last read, before the adoption
	f.Close()
	dir := filepath.Join(tmp, "journal")
	if err := journal.Adopt(ctx, file, dir); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(dir, journal.WithSegmentSize(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	sj := &segJournal{t: t, dir: dir, j: j, seq: map[string]int64{"a": 50}}
	t.Cleanup(func() { sj.j.Close() })
	sj.add("a", 30, 4)
	rep, err := c.in.ApplyJournal(ctx, dir, record)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != 40 || rep.Duplicates != 0 {
		t.Fatalf("after the adoption: %+v; want the 40 lines after the file's position and no line read again", rep)
	}
	if got := c.applied(); got["a"] != 80 {
		t.Fatalf("applied %v", got)
	}
	// Carried over once: the journal source has its own position from then on.
	sj.add("a", 3, 3)
	if rep, err := c.in.ApplyJournal(ctx, dir, record); err != nil || rep.Applied != 3 || rep.Duplicates != 0 {
		t.Fatalf("the next call: %+v, %v", rep, err)
	}
}

func TestANewJournalReaderDoesNotTakeThePositionOfAFileThatIsNotItsFirstSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tmp := t.TempDir()
	file := filepath.Join(tmp, "other.jsonl")
	f, err := journal.OpenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	appendDirect(t, f, "other", 1, 5)
	f.Close()
	c := newConsumer(t)
	if _, err := c.in.ApplyFile(ctx, file, record); err != nil {
		t.Fatal(err)
	}
	sj := newSegJournal(t, 1<<10)
	sj.add("a", 12, 4)
	if rep, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil || rep.Applied != 12 {
		t.Fatalf("%+v, %v: a journal of other lines is read from its start", rep, err)
	}
}
