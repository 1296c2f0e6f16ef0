// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// An exporter given a journal beside a book serves both: outbox_journal_up 0 until the journal's
// directory exists, then its size and each registered reader's lag, and says on standard error why
// the first scrapes could not read it.
func TestMetricsServesAJournalsSizeAndReadersLagBesideABook(t *testing.T) {
	dir := t.TempDir()
	dbPath, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	url, stop := startMetricsWith(t, "--db", dbPath, "--journal", jDir)
	m := scrape(t, url)
	if v, ok := m[`outbox_journal_up`]; !ok || v != 0 {
		t.Fatalf("before the journal exists: outbox_journal_up %v, %v", v, ok)
	}
	if _, ok := m[`outbox_journal_bytes`]; ok {
		t.Fatalf("the size of a journal that does not exist: %v", m)
	}
	if v, ok := m[`outbox_up`]; !ok || v != 0 {
		t.Fatalf("the book's series beside the journal's: outbox_up %v, %v", v, ok)
	}
	j, err := journal.Open(jDir, journal.WithSegmentSize(500))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for seq := int64(1); seq <= 30; seq++ {
		line := fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"w":%q}`, seq, strings.Repeat("w", 20))
		if err := j.Append(context.Background(), "r", []outbox.EventLine{{Seq: seq, Line: line}}); err != nil {
			t.Fatal(err)
		}
	}
	st := j.Stats()
	if err := journal.SetReader(jDir, "platform", 0); err != nil {
		t.Fatal(err)
	}
	m = scrape(t, url)
	want := map[string]float64{
		`outbox_journal_up`:                                     1,
		`outbox_journal_bytes`:                                  float64(st.Bytes),
		`outbox_journal_segments`:                               float64(st.Segments),
		`outbox_journal_reader_lag_bytes{reader="platform"}`:    float64(st.End),
		`outbox_journal_reader_lag_segments{reader="platform"}`: float64(st.Segments),
		`outbox_journal_segments_deleted_total`:                 0,
		`outbox_journal_segments_deleted_under_cap_total`:       0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v, %v; want %v", k, got, ok, v)
		}
	}
	if st.Segments < 2 {
		t.Errorf("the appends sealed no segment: %+v", st)
	}
	code, errOut := stop()
	if code != exitOK || !strings.Contains(errOut, "journal") || !strings.Contains(errOut, "no such file") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
