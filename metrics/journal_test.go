// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// appendBatches appends n batches of three 60-byte lines of run r to j, from seq 1.
func appendBatches(t *testing.T, j *journal.Journal, r string, n int) {
	t.Helper()
	seq := int64(1)
	for range n {
		lines := make([]outbox.EventLine, 3)
		for i := range lines {
			lines[i] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"w":%q}`, r, seq, strings.Repeat("w", 20))}
			seq++
		}
		if err := j.Append(context.Background(), r, lines); err != nil {
			t.Fatal(err)
		}
	}
}

func openJournal(t *testing.T, dir string, opts ...journal.Option) *journal.Journal {
	t.Helper()
	j, err := journal.Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

const journalNames = "outbox_journal_up outbox_journal_bytes outbox_journal_segments outbox_journal_reader_lag_bytes " +
	"outbox_journal_reader_lag_segments outbox_journal_segments_deleted_total outbox_journal_segments_deleted_under_cap_total"

func journalExposition(up, bytes, segments int64, lags string, deleted, underCap int64) string {
	return fmt.Sprintf(`
# HELP outbox_journal_up 1 when the last read of the journal directory succeeded, 0 when it failed or the directory does not exist yet.
# TYPE outbox_journal_up gauge
outbox_journal_up %d
# HELP outbox_journal_bytes Bytes the journal's segments hold: from the first retained byte to the journal's end.
# TYPE outbox_journal_bytes gauge
outbox_journal_bytes %d
# HELP outbox_journal_segments Segment files the journal holds.
# TYPE outbox_journal_segments gauge
outbox_journal_segments %d
%s# HELP outbox_journal_segments_deleted_total Segments retention deleted; kept in the journal's directory: it survives restarts and never goes down.
# TYPE outbox_journal_segments_deleted_total counter
outbox_journal_segments_deleted_total %d
# HELP outbox_journal_segments_deleted_under_cap_total Of the segments retention deleted, those deleted under the size cap while a reader had not read them; kept in the journal's directory.
# TYPE outbox_journal_segments_deleted_under_cap_total counter
outbox_journal_segments_deleted_under_cap_total %d
`, up, bytes, segments, lags, deleted, underCap)
}

const lagHelp = `# HELP outbox_journal_reader_lag_bytes Bytes a registered reader has not read yet, from its registered position to the journal's end; 0 for a position past the end.
# TYPE outbox_journal_reader_lag_bytes gauge
`
const lagSegmentsHelp = `# HELP outbox_journal_reader_lag_segments Segments holding bytes a registered reader has not read yet.
# TYPE outbox_journal_reader_lag_segments gauge
`

func TestTheJournalCollectorShowsBytesSegmentsAndEachReadersLag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, dir, journal.WithSegmentSize(500))
	appendBatches(t, j, "r", 12)
	st := j.Stats()
	if st.Segments < 3 {
		t.Fatalf("the appends sealed too few segments: %+v", st)
	}
	if err := journal.SetReader(dir, "stopped", 0); err != nil {
		t.Fatal(err)
	}
	if err := journal.SetReader(dir, "current", st.End); err != nil {
		t.Fatal(err)
	}
	lags := lagHelp + fmt.Sprintf("outbox_journal_reader_lag_bytes{reader=\"current\"} 0\noutbox_journal_reader_lag_bytes{reader=\"stopped\"} %d\n", st.End) +
		lagSegmentsHelp + fmt.Sprintf("outbox_journal_reader_lag_segments{reader=\"current\"} 0\noutbox_journal_reader_lag_segments{reader=\"stopped\"} %d\n", st.Segments)
	want := journalExposition(1, st.Bytes, int64(st.Segments), lags, 0, 0)
	if err := testutil.CollectAndCompare(NewJournalCollector(dir), strings.NewReader(want), strings.Fields(journalNames)...); err != nil {
		t.Fatal(err)
	}
}

func TestTheJournalCollectorCountsSegmentsDeletedUnderTheCap(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	// Retention under a cap trims after each seal, deleting what the stopped reader has not read.
	j := openJournal(t, dir, journal.WithSegmentSize(500), journal.WithMaxBytes(1200))
	if err := journal.SetReader(dir, "stopped", 0); err != nil {
		t.Fatal(err)
	}
	appendBatches(t, j, "r", 30)
	st := j.Stats()
	if st.DeletedUnderCap == 0 || st.DeletedUnderCap != st.DeletedSegments {
		t.Fatalf("the cap deleted nothing: %+v", st)
	}
	deleted := st.DeletedUnderCap
	info, err := journal.Retained(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := NewJournalCollector(dir)
	for _, name := range []string{"outbox_journal_segments_deleted_total", "outbox_journal_segments_deleted_under_cap_total"} {
		if got, _ := testutil.GatherAndCount(newRegistry(t, c), name); got != 1 {
			t.Fatalf("%s: %d series", name, got)
		}
	}
	m := scrape(t, c)
	if m["outbox_journal_segments_deleted_total"] != float64(deleted) ||
		m["outbox_journal_segments_deleted_under_cap_total"] != float64(deleted) {
		t.Fatalf("deleted %d under the cap; scrape %v", deleted, m)
	}
	if m["outbox_journal_segments"] != float64(st.Segments) ||
		m["outbox_journal_bytes"] != float64(info.End-info.First) ||
		m[`outbox_journal_reader_lag_bytes{reader=stopped}`] != float64(info.End) {
		t.Fatalf("after the trim: %v (retained %+v)", m, info)
	}
	// The counts are the directory's: a journal opened again, and a new collector, still see them.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	openJournal(t, dir, journal.WithSegmentSize(500))
	if m := scrape(t, NewJournalCollector(dir)); m["outbox_journal_segments_deleted_under_cap_total"] != float64(deleted) {
		t.Fatalf("after a reopen: %v", m)
	}
}

func TestTheJournalCollectorAnswersUpZeroUntilTheJournalExists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	var heard []error
	c := NewJournalCollector(dir, WithErrorHandler(func(err error) { heard = append(heard, err) }))
	for range 2 {
		if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP outbox_journal_up 1 when the last read of the journal directory succeeded, 0 when it failed or the directory does not exist yet.
# TYPE outbox_journal_up gauge
outbox_journal_up 0
`)); err != nil {
			t.Fatal(err)
		}
	}
	if len(heard) != 2 || !errors.Is(heard[0], os.ErrNotExist) {
		t.Fatalf("heard %v", heard)
	}
	j := openJournal(t, dir, journal.WithSegmentSize(500))
	appendBatches(t, j, "r", 1)
	st := j.Stats()
	if err := testutil.CollectAndCompare(c, strings.NewReader(journalExposition(1, st.Bytes, 1, "", 0, 0)), strings.Fields(journalNames)...); err != nil {
		t.Fatal(err)
	}
}
