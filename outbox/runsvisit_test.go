// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// walMark is where the WAL's current generation ends: its salt and its frames.
type walMark struct {
	salt   uint64
	frames int
}

// walPagesSince returns the pages the frames written after m hold, and whether the WAL is still the
// generation m saw (a checkpoint that restarted it rewrote the file from its start).
func walPagesSince(t *testing.T, path string, m walMark) (pages []uint32, now walMark, same bool) {
	t.Helper()
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	const header, frame = 32, 24 + 4096
	if len(wal) < header {
		return nil, walMark{}, m.salt == 0
	}
	now.salt = binary.BigEndian.Uint64(wal[16:24])
	for off := header; off+frame <= len(wal) && binary.BigEndian.Uint64(wal[off+8:off+16]) == now.salt; off += frame {
		if now.frames >= m.frames {
			pages = append(pages, binary.BigEndian.Uint32(wal[off:off+4]))
		}
		now.frames++
	}
	return pages, now, now.salt == m.salt
}

// TestAnEnqueueOrARecordOfAnOpenRunWritesNoPageOfTheIndexOfTheRunsRecoveryVisits: the index of the
// runs recovery visits is not rewritten by the commits that pass through a run already in it, neither
// an enqueue's nor the relay's record of a batch: an enqueue of one event a commit wrote two pages
// beside its own, the run's row and the index's entry, deleted and inserted again.
func TestAnEnqueueOrARecordOfAnOpenRunWritesNoPageOfTheIndexOfTheRunsRecoveryVisits(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "book.db")
	s, err := outbox.Open(ctx, path, outbox.WithDurability(outbox.DurabilityNormal))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	relay := outboxtest.NewRelay(t, s, j, "run")
	var index uint32
	if err := outboxtest.RawDB(t, path).QueryRow(
		`SELECT rootpage FROM sqlite_schema WHERE type = 'index' AND name = 'outbox_runs_open'`).Scan(&index); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.EnqueueEvent(ctx, "run", journal.Builder("run", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"an enqueue", func() error {
			_, err := s.EnqueueEvent(ctx, "run", journal.Builder("run", "x", 0))
			return err
		}},
		{"the relay's record and forgetting of a batch", func() error { return relay.Flush(ctx) }},
		{"an enqueue of three events", func() error {
			_, err := s.EnqueueEvents(ctx, "run", []outbox.EventBuilder{
				journal.Builder("run", "x", 1), journal.Builder("run", "x", 2), journal.Builder("run", "x", 3)})
			return err
		}},
		{"the relay's record of three", func() error { return relay.Flush(ctx) }},
	}
	for _, step := range steps {
		for try := 0; ; try++ {
			_, m, _ := walPagesSince(t, path, walMark{})
			if err := step.do(); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			pages, _, same := walPagesSince(t, path, m)
			if !same {
				if try == 3 {
					t.Fatalf("%s: the WAL restarted at every try", step.name)
				}
				continue // a checkpoint restarted the WAL: the pages of this commit are not all told
			}
			if len(pages) == 0 {
				t.Fatalf("%s wrote no frame", step.name)
			}
			if slices.Contains(pages, index) {
				t.Errorf("%s wrote the page of the index of the runs to visit (page %d; pages %v)", step.name, index, pages)
			}
			break
		}
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var pending int
	for run, err := range s.OpenRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		pending += int(run.Pending)
	}
	if pending != 0 {
		t.Errorf("%d lines pending after the last flush", pending)
	}
}

// unmarkedNeedingRecovery counts the runs that need recovery (rows stored and lines unprojected or
// projected rows unforgotten, or a tail not yet folded into the row, migrations/00010) but are not in
// the index recovery walks.
func unmarkedNeedingRecovery(t *testing.T, path string) (n int, runs string) {
	t.Helper()
	err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*), COALESCE(group_concat(engine_run_id), '') FROM outbox_runs AS r
		WHERE visit = 0 AND (lines > 0 AND (last_seq > projected OR projected > forgotten)
			OR EXISTS (SELECT 1 FROM events_outbox AS t WHERE t.engine_run_id = r.engine_run_id AND t.seq > r.counted_to AND t.counted = 1))`).Scan(&n, &runs)
	if err != nil {
		t.Fatal(err)
	}
	return n, runs
}

func runMarked(t *testing.T, path, run string) bool {
	t.Helper()
	var v int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT visit FROM outbox_runs WHERE engine_run_id = ?`, run).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v == 1
}

// TestAFinishedRunRecoveryUnmarkedIsMarkedAgainByWhateverGivesItLinesToProject: recovery takes a
// finished run out of the index it walks; a line enqueued to it later, by the store or by another
// writer, puts it back in the same statement, and a statement that clears the mark of a run with lines
// pending is undone.
func TestAFinishedRunRecoveryUnmarkedIsMarkedAgainByWhateverGivesItLinesToProject(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	dir := t.TempDir()
	path, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, run := range []string{"a", "b"} {
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", 1)); err != nil {
			t.Fatal(err)
		}
		if err := outboxtest.NewRelay(t, s, j, run).Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !runMarked(t, path, "a") {
		t.Fatal("run a is not marked after its first enqueue")
	}
	if err := outboxtest.NewRelay(t, s, j, "recovery").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if runMarked(t, path, "a") || runMarked(t, path, "b") {
		t.Fatal("recovery left finished runs marked")
	}
	if _, err := s.EnqueueEvent(ctx, "a", journal.Builder("a", "x", 2)); err != nil {
		t.Fatal(err)
	}
	raw := outboxtest.RawDBRW(t, path)
	if _, err := raw.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('b', 2, '{"engine_run_id":"b","seq":2}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE outbox_runs SET visit = 0 WHERE engine_run_id IN ('a', 'b')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if n, runs := unmarkedNeedingRecovery(t, path); n != 0 || !runMarked(t, path, "a") || !runMarked(t, path, "b") {
		t.Fatalf("runs needing recovery left unmarked: %d (%s)", n, runs)
	}
	var visited []string
	for run, err := range s.OpenRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		visited = append(visited, fmt.Sprintf("%s:%d", run.RunID, run.Pending))
	}
	if want := []string{"a:1", "b:1"}; !slices.Equal(visited, want) {
		t.Errorf("OpenRuns: %v, want %v", visited, want)
	}
}

// visitEngine is a child process's engine: it recovers the book into the journal, enqueues three
// lines to its own run and three to the run "again" (finished and unmarked before), then projects its
// own run and stops.
func visitEngine() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	s, err := outbox.Open(ctx, os.Getenv("OUTBOX_TEST_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	j, err := journal.OpenFile(os.Getenv("OUTBOX_TEST_JOURNAL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	run := os.Getenv("OUTBOX_TEST_RUN")
	r, err := outbox.NewRelay(s, j, run)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 1; i <= 3; i++ {
		for _, to := range []string{run, "again"} {
			if _, err := s.EnqueueEvent(ctx, to, journal.Builder(to, "x", fmt.Sprintf("%s-%d", run, i))); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	if err := r.Flush(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestAnEngineKilledAtAnyStepLeavesEveryRunWithLinesToProjectInTheIndexRecoveryWalks: engines are
// SIGKILLed in the middle of each step that changes a run's figures (forgetting kept rows, recovery
// before and after forgetting, an enqueue's commit before and after, a batch in the journal but not
// recorded). After each kill no run that needs recovery is outside the index recovery walks, and the
// last start projects every committed line of every run into the journal once, the run a recovery
// had unmarked as finished and that got lines again included.
func TestAnEngineKilledAtAnyStepLeavesEveryRunWithLinesToProjectInTheIndexRecoveryWalks(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(run string, n int) {
		t.Helper()
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			for i := 1; i <= n; i++ {
				if _, err := s.EnqueueTx(ctx, tx, run, journal.Builder(run, "setup", i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	enqueue("again", 2)
	if err := outboxtest.NewRelay(t, s, j, "again").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue("kept", 9000) // more than a step of forgetting, kept by its relay
	if err := outboxtest.NewRelay(t, s, j, "kept", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue("kept", 5)
	if err := outboxtest.NewRelay(t, s, j, "setup").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	s.Close()
	if runMarked(t, dbPath, "again") {
		t.Fatal("the finished run again is still marked after recovery")
	}
	env := []string{"OUTBOX_TEST_DB=" + dbPath, "OUTBOX_TEST_JOURNAL=" + jPath}
	for i, kill := range []struct {
		point string
		at    int
	}{
		{faultpoint.ForgetStep, 1},
		{faultpoint.RecoverBeforeForget, 1},
		{faultpoint.BeforeCommit, 2},
		{faultpoint.AfterCommit, 3},
		{faultpoint.RecoverAfterForget, 1},
		{faultpoint.BeforeCommit, 5},
		{faultpoint.AfterCommit, 6},
		{faultpoint.RelayAfterAppend, 1},
		{faultpoint.BeforeCommit, 8},
		{faultpoint.RelayAfterAppend, 2},
	} {
		// Each child first recovers what the ones before it left.
		run := fmt.Sprintf("k%d", i)
		child := crashtest.Child(t, "visit-engine", append(env, append(crashtest.KillAt(kill.point, kill.at), "OUTBOX_TEST_RUN="+run)...)...)
		if err := child.Run(); !crashtest.Killed(err) {
			t.Fatalf("the engine of run %s was not killed at %s #%d: %v", run, kill.point, kill.at, err)
		}
		if n, runs := unmarkedNeedingRecovery(t, dbPath); n != 0 {
			t.Fatalf("after a kill at %s #%d, %d runs that need recovery are not in its index: %s", kill.point, kill.at, n, runs)
		}
	}
	if err := crashtest.Child(t, "visit-engine", append(env, "OUTBOX_TEST_RUN=last")...).Run(); err != nil {
		t.Fatalf("the last engine: %v", err)
	}
	if n, runs := unmarkedNeedingRecovery(t, dbPath); n != 0 {
		t.Fatalf("%d runs that need recovery are not in its index: %s", n, runs)
	}

	// A start after the last engine, which left lines of again pending, recovers: every line the
	// book ever committed is in the journal (a batch appended and not recorded before a kill is sent
	// again, byte for byte, which the journal counts as a duplicate), and nothing is left to project.
	s, err = outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if j, err = journal.OpenFile(jPath); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, j, "final").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatal(err)
	}
	runs, enqueued := 0, 0
	for st, err := range s.EveryRun(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		runs++
		got := rep.Runs[st.RunID]
		if st.Pending != 0 || got.Last != st.LastSeq || int64(got.Lines) != st.LastSeq {
			t.Errorf("run %s: book %+v, journal %+v; want every line projected, in the journal", st.RunID, st, got)
		}
		enqueued += got.Lines
	}
	if runs != len(rep.Runs) {
		t.Errorf("the book holds %d runs, the journal %d", runs, len(rep.Runs))
	}
	if again := rep.Runs["again"].Lines; again <= 2 || enqueued <= 9005+again {
		t.Errorf("the engines' enqueues: again holds %d lines, all runs %d; want some lines of the engines", again, enqueued)
	}
	if st, err := s.Totals(ctx); err != nil || st.Pending != 0 {
		t.Errorf("totals %+v, %v; want nothing pending", st, err)
	}
}

// TestAProcessThatEnqueuesToManyRunsLeavesFewOfTheFinishedOnesInTheIndexRecoveryWalks: finished runs
// stay marked until something unmarks them; the store unmarks them itself as it makes more runs, so
// that a process that made hundreds leaves the index (and OpenRuns, which a scrape walks) about as
// many as it made since its last sweep, not all it ever made.
func TestAProcessThatEnqueuesToManyRunsLeavesFewOfTheFinishedOnesInTheIndexRecoveryWalks(t *testing.T) {
	t.Parallel()
	ctx := outboxtest.Patient(t)
	s, path := outboxtest.Setup(t, outbox.WithDurability(outbox.DurabilityNormal))
	sink := outboxtest.NewMemSink()
	const runs = 300
	for i := range runs {
		run := fmt.Sprintf("run-%03d", i)
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", i)); err != nil {
			t.Fatal(err)
		}
		if err := outboxtest.NewRelay(t, s, sink, run).Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var marked int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM outbox_runs WHERE visit = 1`).Scan(&marked); err != nil {
		t.Fatal(err)
	}
	if marked > runs/2 {
		t.Errorf("%d of %d finished runs still marked for recovery", marked, runs)
	}
	if n, list := unmarkedNeedingRecovery(t, path); n != 0 {
		t.Errorf("%d runs that need recovery unmarked: %s", n, list)
	}
	var open int
	for _, err := range s.OpenRuns(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		open++
	}
	if open != 0 {
		t.Errorf("OpenRuns lists %d runs, want none", open)
	}
}
