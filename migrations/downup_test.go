// SPDX-License-Identifier: Apache-2.0

package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// recoveredBook makes a book at the latest version whose rows hold every state a migration down
// meets, with its journal:
//   - run "done": six lines, projected, recovered and forgotten but for its two ledger rows, 2 and 5;
//   - run "keytop": three lines, forgotten but for the ledger row at its top, 3;
//   - run "gone": five lines, projected and forgotten, no row left;
//   - run "live": four lines stored, the first two projected, the other two pending.
func recoveredBook(t *testing.T) (dbPath, jPath string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath = dir+"/book.db", dir+"/journal.jsonl"
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	enqueue := func(run string, n int, keys map[int]string) {
		t.Helper()
		for i := 1; i <= n; i++ {
			var err error
			if k, ok := keys[i]; ok {
				_, _, err = s.EnqueueOnce(ctx, run, k, journal.Builder(run, "x", i))
			} else {
				_, err = s.EnqueueEvent(ctx, run, journal.Builder(run, "x", i))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue("done", 6, map[int]string{2: "done:2", 5: "done:5"})
	enqueue("keytop", 3, map[int]string{3: "keytop:3"})
	enqueue("gone", 5, nil)
	s.Close()
	if s, err = outbox.Open(ctx, dbPath); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := outboxtest.NewRelay(t, s, j, "live").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue("live", 2, nil)
	if err := outboxtest.NewRelay(t, s, j, "live").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= 4; i++ {
		if _, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	return dbPath, jPath
}

// migrateDownTo rolls the book back as the goose CLI would: no guard, whatever it drops.
func migrateDownTo(t *testing.T, dbPath string, version int64) {
	t.Helper()
	d := outboxtest.RawDBRW(t, dbPath)
	p, err := migrations.NewProvider(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(context.Background(), version); err != nil {
		t.Fatalf("down to %d: %v", version, err)
	}
	d.Close()
}

// recoverInto opens the book (which migrates it up), recovers every run into the journal, and returns
// what the journal then holds.
func recoverInto(t *testing.T, dbPath, jPath string) journal.Report {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatalf("open after up: %v", err)
	}
	defer s.Close()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := outboxtest.NewRelay(t, s, j, "next").Recover(ctx); err != nil {
		t.Fatalf("recover after down and up: %v", err)
	}
	return verifyFile(t, jPath)
}

// recoverBehindInto is recoverInto for a book rolled back below version 2, which drops the relay's
// positions: the book no longer knows what its journal holds, so a start stops with ErrBookBehind
// before appending anything. An operator who accepts re-sending (the journal takes a re-delivery
// that matches byte for byte) turns the check off; what the journal then holds is returned.
func recoverBehindInto(t *testing.T, dbPath, jPath string) journal.Report {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatalf("open after up: %v", err)
	}
	defer s.Close()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before := verifyFile(t, jPath)
	if err := outboxtest.NewRelay(t, s, j, "next").Recover(ctx); !errors.Is(err, outbox.ErrBookBehind) {
		t.Fatalf("recover of a book rolled back below its positions: %v, want ErrBookBehind", err)
	}
	if after := verifyFile(t, jPath); after.Lines != before.Lines {
		t.Fatalf("a start stopped by ErrBookBehind appended: %d lines, then %d", before.Lines, after.Lines)
	}
	if err := outboxtest.NewRelay(t, s, j, "next", outbox.WithBookCheck(false)).Recover(ctx); err != nil {
		t.Fatalf("recover after down and up: %v", err)
	}
	return verifyFile(t, jPath)
}

func verifyFile(t *testing.T, jPath string) journal.Report {
	t.Helper()
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

func runLines(rep journal.Report) string {
	return fmt.Sprintf("done %d, keytop %d, gone %d, live %d lines",
		rep.Runs["done"].Lines, rep.Runs["keytop"].Lines, rep.Runs["gone"].Lines, rep.Runs["live"].Lines)
}

func TestABookMigratedDownTwiceAndUpRecoversWithNothingLostOrSentAsNew(t *testing.T) {
	t.Parallel()
	dbPath, jPath := recoveredBook(t)
	before := verifyFile(t, jPath)
	migrateDownTo(t, dbPath, 1)
	rep := recoverBehindInto(t, dbPath, jPath)
	if got, want := runLines(rep), "done 6, keytop 3, gone 5, live 4 lines"; got != want {
		t.Errorf("journal after recovery: %s, want %s", got, want)
	}
	if rep.Lines != before.Lines+2 {
		t.Errorf("journal holds %d lines, want the %d it had and live's two pending ones", rep.Lines, before.Lines)
	}
	// The positions the down step dropped are rebuilt from what the rows still show: a forgotten row
	// was projected, and so was a ledger row. Only live's projected rows, which nothing in the book
	// tells from pending ones, are sent again, byte for byte, and the journal skips them.
	if rep.Runs["done"].Duplicates != 0 || rep.Runs["keytop"].Duplicates != 0 || rep.Runs["live"].Duplicates > 2 {
		t.Errorf("lines sent again: done %d, keytop %d, live %d",
			rep.Runs["done"].Duplicates, rep.Runs["keytop"].Duplicates, rep.Runs["live"].Duplicates)
	}
}

func TestABookMigratedDownOnceAndUpKeepsEveryRunsNumbersFromItsPosition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath, jPath := recoveredBook(t)
	migrateDownTo(t, dbPath, 2)
	rep := recoverInto(t, dbPath, jPath)
	if got, want := runLines(rep), "done 6, keytop 3, gone 5, live 4 lines"; got != want {
		t.Errorf("journal after recovery: %s, want %s", got, want)
	}
	// Version 2 keeps the positions, so nothing the journal has is sent again.
	if rep.Duplicates != 0 {
		t.Errorf("%d lines sent again", rep.Duplicates)
	}
	// The highest seq of a forgotten run went with version 3; its position says how far it got.
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for run, want := range map[string]int64{"gone": 6, "done": 7} {
		if seq, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", 0)); err != nil || seq != want {
			t.Errorf("next seq of run %s: %d, %v; want %d", run, seq, err, want)
		}
	}
}

func TestABookMigratedDownAndUpIsRecoveredOnceAndThenHasNothingToSend(t *testing.T) {
	t.Parallel()
	dbPath, jPath := recoveredBook(t)
	migrateDownTo(t, dbPath, 1)
	first := recoverBehindInto(t, dbPath, jPath)
	// The rows of the run the relay had forgotten are gone with the positions, so the book cannot
	// learn that run again by re-sending: every start stops with ErrBookBehind until an operator
	// accepts the journal's positions (outbox reconcile) or turns the check off, as here.
	if again := recoverBehindInto(t, dbPath, jPath); again.Lines != first.Lines || again.Duplicates != first.Duplicates {
		t.Errorf("a second recovery sent lines: %d lines, %d duplicates; was %d, %d",
			again.Lines, again.Duplicates, first.Lines, first.Duplicates)
	}
}

func TestAPositionTheRowsProveButTheJournalLacksIsRefusedByTheSinkNotSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := dir+"/book.db", dir+"/journal.jsonl"
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		if _, err := s.EnqueueEvent(ctx, "f", journal.Builder("f", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Outside the protocol: a key marked before the journal had its line, and the rows dropped
	// unprojected, so the book claims seq 4 is in a journal that holds nothing of the run.
	if err := s.MarkAnnounced(ctx, "f", map[int64]string{3: "f:3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForgetEvents(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.EnqueueEvent(ctx, "f", journal.Builder("f", "x", 5)); err != nil || seq != 5 {
		t.Fatalf("enqueue after forgetting: %d, %v", seq, err)
	}
	s.Close()
	migrateDownTo(t, dbPath, 1)
	if s, err = outbox.Open(ctx, dbPath); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	err = outboxtest.NewRelay(t, s, j, "next").Recover(ctx)
	if !errors.Is(err, outbox.ErrSinkRefused) || !errors.Is(err, journal.ErrStreamGap) {
		t.Errorf("recover: %v, want the journal's refusal of a gap", err)
	}
	if st, err := os.Stat(jPath); err != nil || st.Size() != 0 {
		t.Errorf("journal after the refusal: %v, %v", st.Size(), err)
	}
}

// runFigures is every run's figures (migrations/00005), one string per run: as the store reads them,
// each row with its tail (migrations/00010) where the book is at a version that keeps one.
func runFigures(t *testing.T, dbPath string) []string {
	t.Helper()
	d := outboxtest.RawDB(t, dbPath)
	from := "outbox_runs"
	var views int
	if err := d.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'view' AND name = 'outbox_run_figures'`).Scan(&views); err != nil {
		t.Fatal(err)
	}
	if views > 0 {
		from = "outbox_run_figures"
	}
	rows, err := d.Query(
		`SELECT engine_run_id, last_seq, projected, forgotten, lines, ledger_lines FROM ` + from + ` ORDER BY engine_run_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var run string
		var last, projected, forgotten, lines, ledger int64
		if err := rows.Scan(&run, &last, &projected, &forgotten, &lines, &ledger); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s: last %d, projected %d, forgotten %d, %d lines, %d in the ledger",
			run, last, projected, forgotten, lines, ledger))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestABookMigratedDownPastTheRunFiguresAndUpRebuildsThemFromItsRows(t *testing.T) {
	t.Parallel()
	dbPath, jPath := recoveredBook(t)
	before := runFigures(t, dbPath)
	want := []string{
		"done: last 6, projected 6, forgotten 6, 2 lines, 2 in the ledger",
		"gone: last 5, projected 5, forgotten 5, 0 lines, 0 in the ledger",
		"keytop: last 3, projected 3, forgotten 3, 1 lines, 1 in the ledger",
		"live: last 4, projected 2, forgotten 2, 2 lines, 0 in the ledger",
	}
	if diff := cmp.Diff(want, before); diff != "" {
		t.Errorf("figures kept by the book (-want +got):\n%s", diff)
	}
	migrateDownTo(t, dbPath, 4)
	if outboxtest.TableNames(t, outboxtest.RawDB(t, dbPath))["outbox_runs"] {
		t.Fatal("outbox_runs is still there after the down step")
	}
	journalBefore := verifyFile(t, jPath)
	rep := recoverInto(t, dbPath, jPath)
	// Up again, the figures are what the rows and positions show, and recovery had only live's two
	// pending lines to send.
	after := runFigures(t, dbPath)
	if diff := cmp.Diff(append(want[:3:3], "live: last 4, projected 4, forgotten 4, 0 lines, 0 in the ledger"), after); diff != "" {
		t.Errorf("figures after down, up and recovery (-want +got):\n%s", diff)
	}
	if rep.Lines != journalBefore.Lines+2 || rep.Duplicates != 0 {
		t.Errorf("journal after recovery: %d lines, %d duplicates; want %d and none", rep.Lines, rep.Duplicates, journalBefore.Lines+2)
	}
}

// TestABookMigratedDownPastTheCountingStoreKeepsItsFiguresAndItsTriggersCountEveryInsertAgain: the
// down step of version 7 leaves the figures as the store counted them, and the triggers of version 5
// count the inserts from then on (a release before 7 inserts its rows unmarked and relies on them);
// up again, the store counts its own lines on from the same figures.
func TestABookMigratedDownPastTheCountingStoreKeepsItsFiguresAndItsTriggersCountEveryInsertAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath, _ := recoveredBook(t)
	before := runFigures(t, dbPath)
	migrateDownTo(t, dbPath, 6)
	d := outboxtest.RawDBRW(t, dbPath)
	var counted int
	if err := d.QueryRow(`SELECT count(*) FROM pragma_table_info('events_outbox') WHERE name = 'counted'`).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != 0 {
		t.Error("events_outbox.counted is still there after the down step")
	}
	if diff := cmp.Diff(before, runFigures(t, dbPath)); diff != "" {
		t.Errorf("figures after the down step (-before +after):\n%s", diff)
	}
	// What a release of version 6 writes: rows without the mark, counted by the triggers alone.
	for _, stmt := range []string{
		`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('live', 5, '{"v6":5}'), ('v6', 1, '{"v6":1}'), ('v6', 2, '{"v6":2}')`,
		`DELETE FROM events_outbox WHERE engine_run_id = 'v6' AND seq = 1`,
	} {
		if _, err := d.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	d.Close()
	want := []string{
		before[0], before[1], before[2],
		"live: last 5, projected 2, forgotten 2, 3 lines, 0 in the ledger",
		"v6: last 2, projected 0, forgotten 0, 1 lines, 0 in the ledger",
	}
	if diff := cmp.Diff(want, runFigures(t, dbPath)); diff != "" {
		t.Errorf("figures after version 6's writes (-want +got):\n%s", diff)
	}
	s, err := outbox.Open(ctx, dbPath) // migrates up again
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, run := range []string{"live", "v6", "v6"} {
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", 0)); err != nil {
			t.Fatal(err)
		}
	}
	want[3] = "live: last 6, projected 2, forgotten 2, 4 lines, 0 in the ledger"
	want[4] = "v6: last 4, projected 0, forgotten 0, 3 lines, 0 in the ledger"
	if diff := cmp.Diff(want, runFigures(t, dbPath)); diff != "" {
		t.Errorf("figures after the store enqueued again (-want +got):\n%s", diff)
	}
}

// markedRuns is the runs the index of the runs recovery visits holds, read through it.
func markedRuns(t *testing.T, dbPath, where string) []string {
	t.Helper()
	rows, err := outboxtest.RawDB(t, dbPath).Query(
		`SELECT engine_run_id FROM outbox_runs INDEXED BY outbox_runs_open WHERE ` + where + ` ORDER BY engine_run_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var run string
		if err := rows.Scan(&run); err != nil {
			t.Fatal(err)
		}
		out = append(out, run)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestABookMigratedDownPastTheVisitMarkIndexesTheRunsToRecoverFromItsFiguresAndUpMarksThemAgain: the
// down step of version 8 puts back the index computed from the figures, holding the same runs the
// marks held; a run that a release of version 7 gives lines is in it, and up again it is marked and
// recovered with the others.
func TestABookMigratedDownPastTheVisitMarkIndexesTheRunsToRecoverFromItsFiguresAndUpMarksThemAgain(t *testing.T) {
	t.Parallel()
	dbPath, jPath := recoveredBook(t)
	const toRecover = `lines > 0 AND (last_seq > projected OR projected > forgotten)`
	if got := markedRuns(t, dbPath, "visit = 1"); !slices.Equal(got, []string{"live"}) {
		t.Fatalf("marked runs %v, want live alone (recovery unmarked the finished ones)", got)
	}
	before := runFigures(t, dbPath)
	migrateDownTo(t, dbPath, 7)
	var visit int
	if err := outboxtest.RawDB(t, dbPath).QueryRow(`SELECT count(*) FROM pragma_table_info('outbox_runs') WHERE name = 'visit'`).Scan(&visit); err != nil {
		t.Fatal(err)
	}
	if visit != 0 {
		t.Error("outbox_runs.visit is still there after the down step")
	}
	if got := markedRuns(t, dbPath, toRecover); !slices.Equal(got, []string{"live"}) {
		t.Errorf("the index of version 7 holds %v, want live", got)
	}
	if diff := cmp.Diff(before, runFigures(t, dbPath)); diff != "" {
		t.Errorf("figures after the down step (-before +after):\n%s", diff)
	}
	// What a release of version 7 writes to a finished run: a row its trigger counts.
	d := outboxtest.RawDBRW(t, dbPath)
	if _, err := d.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('gone', 6, '{"engine_run_id":"gone","seq":6}')`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if got := markedRuns(t, dbPath, toRecover); !slices.Equal(got, []string{"gone", "live"}) {
		t.Errorf("the index of version 7 holds %v, want gone and live", got)
	}
	rep := recoverInto(t, dbPath, jPath) // migrates up first
	if got := markedRuns(t, dbPath, "visit = 1"); len(got) != 0 {
		t.Errorf("marked runs after recovery: %v, want none", got)
	}
	if rep.Runs["gone"].Last != 6 || rep.Runs["live"].Last != 4 {
		t.Errorf("journal after up and recovery: gone %+v, live %+v; want up to 6 and 4", rep.Runs["gone"], rep.Runs["live"])
	}
}
