// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestApplyJournalRefusesAnInboxWhoseDatabaseLiesInsideTheJournalDirectory(t *testing.T) {
	t.Parallel()
	sj := newSegJournal(t, 500)
	sj.add("a", 3, 3)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(sj.dir, link); err != nil {
		t.Fatal(err)
	}
	for name, dbPath := range map[string]string{
		"in the directory":             filepath.Join(sj.dir, "platform.db"),
		"in the directory by its link": filepath.Join(link, "platform.db"),
	} {
		in, err := Open(context.Background(), dbPath)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		h := func(context.Context, *sql.Tx, Event) error { calls++; return nil }
		rep, err := in.ApplyJournal(context.Background(), sj.dir, h)
		if err == nil || !strings.Contains(err.Error(), "inside the journal directory") {
			t.Errorf("%s: ApplyJournal: %+v, %v; want a refusal naming the journal directory", name, rep, err)
		}
		// The deadline only bounds a FollowJournal that does not refuse: one that does returns at once.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = in.FollowJournal(ctx, sj.dir, h)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "inside the journal directory") {
			t.Errorf("%s: FollowJournal: %v; want a refusal naming the journal directory", name, err)
		}
		if calls != 0 {
			t.Errorf("%s: %d lines handled, want none", name, calls)
		}
		if pos, err := in.SourcePosition(context.Background(), journalSourcePrefix+sj.dir); err != nil || pos != nil {
			t.Errorf("%s: a position was stored: %v, %v", name, pos, err)
		}
		in.Close()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(dbPath + suffix)
		}
	}
	// Beside the journal directory, as it should be, the same journal applies.
	c := newConsumer(t)
	if rep, err := c.in.ApplyJournal(context.Background(), sj.dir, record); err != nil || rep.Applied != 3 {
		t.Fatalf("an inbox outside the journal: %+v, %v", rep, err)
	}
}
