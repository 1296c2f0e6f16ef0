// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

func totals(t *testing.T, in *inbox.Inbox) inbox.Totals {
	t.Helper()
	tot, err := in.Totals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tot
}

// Every line a call is given counts in the field its Report counts it in, and the counts are the
// database's: they are read back the same after the inbox is closed and opened again, and go on
// from there.
func TestTheInboxCountsEachLineAsItsReportDoesAndKeepsTheCountsAcrossARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	if got := totals(t, in); got != (inbox.Totals{}) {
		t.Fatalf("a new inbox counts %+v", got)
	}
	var want inbox.Totals
	add := func(rep inbox.Report) {
		want.Applied += int64(rep.Applied)
		want.Duplicates += int64(rep.Duplicates)
		want.Stale += int64(rep.Stale)
		want.Quarantined += int64(rep.Quarantined)
	}
	add(mustApply(t, in, lines("a", 1, 5)))
	add(mustApply(t, in, append(lines("a", 3, 7), line("b", 2), line("b", 3)))) // 3 duplicates, a gap in b
	if want.Applied != 7 || want.Duplicates != 3 || want.Quarantined != 2 {
		t.Fatalf("the reports say %+v", want)
	}
	if got := totals(t, in); got != want {
		t.Fatalf("Totals = %+v, the reports say %+v", got, want)
	}
	in.Close()
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if got := totals(t, in); got != want {
		t.Fatalf("after a restart Totals = %+v, want %+v", got, want)
	}
	add(mustApply(t, in, lines("a", 8, 9)))
	if got := totals(t, in); got != want {
		t.Fatalf("after more lines Totals = %+v, want %+v", got, want)
	}
	ro, err := inbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got := totals(t, ro); got != want {
		t.Fatalf("read-only beside it Totals = %+v, want %+v", got, want)
	}
}

// The counts commit with the lines' effects: a call that fails, nothing of it committed, counts
// nothing, so the counts never say more than the consumer's tables hold.
func TestACallThatFailsCountsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, _ := setup(t)
	mustApply(t, in, lines("a", 1, 3))
	before := totals(t, in)
	boom := errors.New("boom")
	_, err := in.Apply(ctx, lines("a", 1, 6), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 6 {
			return boom
		}
		return insertHandler(ctx, tx, ev)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Apply = %v", err)
	}
	if got := totals(t, in); got != before {
		t.Fatalf("after a failed call Totals = %+v, want %+v", got, before)
	}
}

// The counts' migration goes down to the schema before it (no counts) and up again (counting from
// zero); a read-only open of a database at the earlier version says it keeps no counts.
func TestTheCountsMigrationGoesDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	mustApply(t, in, lines("a", 1, 4))
	in.Close()
	d := rawDBRW(t, path)
	p := gooseCLI(t, d)
	if _, err := p.DownTo(ctx, 3); err != nil {
		t.Fatalf("down: %v", err)
	}
	if n := count(t, d, `SELECT count(*) FROM sqlite_schema WHERE name = 'inbox_counters'`); n != 0 {
		t.Fatal("the counts' table is still there after down")
	}
	ro, err := inbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Totals(ctx); !errors.Is(err, inbox.ErrNoTotals) {
		t.Fatalf("Totals at version 3 = %v, want ErrNoTotals", err)
	}
	if p, err := ro.Position(ctx, "a"); err != nil || p != 4 {
		t.Fatalf("Position at version 3 = %d, %v", p, err)
	}
	ro.Close()
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	d.Close()
	in, err = inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if got := totals(t, in); got != (inbox.Totals{}) {
		t.Fatalf("after down and up Totals = %+v, want zeros", got)
	}
	mustApply(t, in, lines("a", 5, 6))
	if got := totals(t, in); got != (inbox.Totals{Applied: 2}) {
		t.Fatalf("Totals = %+v, want 2 applied", got)
	}
}
