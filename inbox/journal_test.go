// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// segJournal is a segmented journal a test writes to, with small segments.
type segJournal struct {
	t   testing.TB
	dir string
	j   *journal.Journal
	seq map[string]int64
}

// segLineSize is the length of a line segAppend writes for a one-letter run and a seq below 10.
const segLineSize = 70

func newSegJournal(t testing.TB, segSize int64) *segJournal {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "journal")
	j, err := journal.Open(dir, journal.WithSegmentSize(segSize))
	if err != nil {
		t.Fatal(err)
	}
	sj := &segJournal{t: t, dir: dir, j: j, seq: map[string]int64{}}
	t.Cleanup(func() { sj.j.Close() })
	return sj
}

// add appends run's next n lines, k to a batch.
func (sj *segJournal) add(run string, n, k int) {
	sj.t.Helper()
	for n > 0 {
		b := min(n, k)
		lines := make([]outbox.EventLine, b)
		for i := range lines {
			sj.seq[run]++
			s := sj.seq[run]
			lines[i] = outbox.EventLine{Seq: s, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"unit","data":{"cents":100}}`, run, s)}
		}
		if err := sj.j.Append(context.Background(), run, lines); err != nil {
			sj.t.Fatalf("Append: %v", err)
		}
		n -= b
	}
}

func (sj *segJournal) segments() []int64 {
	sj.t.Helper()
	bases, err := listSegments(sj.dir)
	if err != nil {
		sj.t.Fatal(err)
	}
	return bases
}

// readerAt returns the position the journal's registry holds for name, -1 when none.
func readerAt(t testing.TB, dir, name string) int64 {
	t.Helper()
	rs, err := journal.Readers(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Name == name {
			return r.Position
		}
	}
	return -1
}

func (c *consumer) journalPosition(dir string) JournalPosition {
	c.t.Helper()
	abs, _ := filepath.Abs(dir)
	pos, err := c.in.SourcePosition(context.Background(), journalSourcePrefix+abs)
	if err != nil || pos == nil {
		c.t.Fatalf("no journal position: %v", err)
	}
	jp, err := ParseJournalPosition(pos)
	if err != nil {
		c.t.Fatal(err)
	}
	return jp
}

func TestApplyJournalAppliesEveryLineOnceAcrossSegmentBoundaries(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 500)
	c := newConsumer(t, WithBatchLines(3))
	ctx := context.Background()
	total := map[string]int64{}
	for round := range 4 {
		sj.add("a", 5, 2)
		sj.add("b", 4, 3)
		total["a"] += 5
		total["b"] += 4
		rep, err := c.in.ApplyJournal(ctx, sj.dir, record)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if rep.Applied != 9 || rep.Duplicates != 0 {
			t.Fatalf("round %d: %+v, want 9 applied", round, rep)
		}
		if round == 1 {
			c.reopen()
		}
	}
	if got := c.applied(); got["a"] != total["a"] || got["b"] != total["b"] {
		t.Fatalf("applied %v, want %v", got, total)
	}
	if n := len(sj.segments()); n < 4 {
		t.Fatalf("%d segments: the test wants several", n)
	}
	end := sj.end()
	if jp := c.journalPosition(sj.dir); jp.Position != end {
		t.Fatalf("stored position %v, the journal ends at %d", jp, end)
	}
	if at := readerAt(t, sj.dir, c.in.readerName()); at != end {
		t.Fatalf("registered at %d, the journal ends at %d", at, end)
	}
	if rep, err := c.in.ApplyJournal(ctx, sj.dir, record); err != nil || rep != (Report{}) {
		t.Fatalf("a caught-up call: %+v, %v", rep, err)
	}
}

// end is the journal-wide position after the last byte.
func (sj *segJournal) end() int64 {
	sj.t.Helper()
	bases := sj.segments()
	last := bases[len(bases)-1]
	size, err := fileSize(filepath.Join(sj.dir, segmentFileName(last)))
	if err != nil {
		sj.t.Fatal(err)
	}
	return last + size
}

var _ = errors.Is

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
