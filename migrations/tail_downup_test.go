// SPDX-License-Identifier: Apache-2.0

package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// rowFigures is every run's row of figures as the table holds it, without a tail.
func rowFigures(t *testing.T, dbPath string) string {
	t.Helper()
	var s string
	if err := outboxtest.RawDB(t, dbPath).QueryRow(`SELECT group_concat(engine_run_id || ':' || last_seq || '/' || lines, ' ')
		FROM (SELECT * FROM outbox_runs ORDER BY engine_run_id)`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestABookMigratedDownPastTheFiguresTailHoldsEveryLineInItsRowsAndUpCountsOnFromThem: the down
// step of version 10 folds every run's tail, the lines its row of figures did not hold yet, into the
// row, so that version 9, which reads the rows as exact, reads the same figures the store reported;
// up again, the figures and the next seq follow on from them.
func TestABookMigratedDownPastTheFiguresTailHoldsEveryLineInItsRowsAndUpCountsOnFromThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath, _ := recoveredBook(t)
	before := runFigures(t, dbPath)
	rows := rowFigures(t, dbPath)
	if !strings.Contains(rows, "live:2/0") {
		t.Fatalf("rows of figures %q: want live's last two lines in its tail, not in its row", rows)
	}
	migrateDownTo(t, dbPath, 9)
	var views int
	if err := outboxtest.RawDB(t, dbPath).QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'outbox_run_figures'`).Scan(&views); err != nil {
		t.Fatal(err)
	}
	if views != 0 {
		t.Error("the view of the figures is still there after the down step")
	}
	if diff := cmp.Diff(before, runFigures(t, dbPath)); diff != "" {
		t.Errorf("the rows of figures after the down step against the figures before it (-before +after):\n%s", diff)
	}
	var trigger string
	if err := outboxtest.RawDB(t, dbPath).QueryRow(`SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = 'outbox_runs_visit'`).Scan(&trigger); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(trigger, "counted_to") {
		t.Errorf("the mark's trigger after the down step still looks for a tail:\n%s", trigger)
	}
	s, err := outbox.Open(ctx, dbPath) // migrates up again
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if diff := cmp.Diff(before, runFigures(t, dbPath)); diff != "" {
		t.Errorf("figures up again (-before +after):\n%s", diff)
	}
	if seq, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", 5)); seq != 5 || err != nil {
		t.Fatalf("the next enqueue to live: %d, %v; want seq 5", seq, err)
	}
	st, err := s.Run(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastSeq != 5 || st.Lines != 3 || st.Projected != 2 {
		t.Errorf("live after an enqueue up again: %+v; want last 5, 3 lines, projected 2", st)
	}
	if rows := rowFigures(t, dbPath); !strings.Contains(rows, "live:4/2") {
		t.Errorf("rows of figures %q: want live's row as the down step folded it, its new line in its tail", rows)
	}
}
