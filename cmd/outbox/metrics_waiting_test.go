// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// An exporter started before its engine and its consumer serves: outbox_up 0 (outbox_inbox_up 0)
// while the databases do not exist, 1 once they do, and it exits 0 when interrupted.
func TestMetricsAnswersUpZeroWhileTheBookDoesNotExistAndOneOnceItDoes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, inboxPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "consumer.db")
	// SQLite creates a database's file before it writes a byte: an empty file is one not created yet.
	if err := os.WriteFile(inboxPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	url, stop := startMetricsWith(t, "--db", dbPath, "--inbox", inboxPath)
	for range 2 {
		m := scrape(t, url)
		if v, ok := m[`outbox_up`]; !ok || v != 0 {
			t.Fatalf("before the book exists: outbox_up %v, %v", v, ok)
		}
		if v, ok := m[`outbox_inbox_up`]; !ok || v != 0 {
			t.Fatalf("before the inbox exists: outbox_inbox_up %v, %v", v, ok)
		}
		if _, ok := m[`outbox_lines_enqueued_total`]; ok {
			t.Fatalf("a counter of a book that does not exist: %v", m)
		}
	}
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "t", 1)); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, inboxPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	m := scrape(t, url)
	if m[`outbox_up`] != 1 || m[`outbox_lines_enqueued_total`] != 1 || m[`outbox_run_pending_lines{run="r"}`] != 1 {
		t.Errorf("once the book exists: %v", bookSeries(m))
	}
	if m[`outbox_inbox_up`] != 1 || m[`outbox_inbox_lines_applied_total`] != 0 {
		t.Errorf("once the inbox exists: %v", inboxSeries(m))
	}
	code, errOut := stop()
	if code != exitOK || !strings.Contains(errOut, "does not exist") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
