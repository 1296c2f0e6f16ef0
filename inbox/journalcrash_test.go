// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// The journal consumer's journal: two runs of journalCrashLines lines each, a's in batches of 3 and
// b's in batches of 4 that begin with the last line of the one before (a relay's re-delivery), in
// segments of journalCrashSegment bytes, so that the inbox's batches straddle segment ends.
const (
	journalCrashLines   = 120
	journalCrashSegment = 1500
	journalCrashReader  = "crash-consumer"
)

// crashJournalConsumer applies the journal directory with ApplyJournal, its effects into a table
// without a key, so that a line applied twice would show; it dies where KillAt says.
func crashJournalConsumer() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	in, err := inbox.Open(ctx, os.Getenv("INBOX_TEST_DB"), inbox.WithBatchLines(5), inbox.WithReaderName(journalCrashReader))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE IF NOT EXISTS effects (run TEXT NOT NULL, seq INTEGER NOT NULL)`)
		return err
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		faultpoint.Hit(inHandler)
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (run, seq) VALUES (?, ?)`, ev.RunID, ev.Seq)
		return err
	}
	if _, err := in.ApplyJournal(ctx, os.Getenv("INBOX_TEST_JOURNAL"), h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestAJournalConsumerKilledMidSegmentAppliesEveryLineOnceAndNeverRegistersAhead(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "journal")
	j, err := journal.Open(dir, journal.WithSegmentSize(journalCrashSegment))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for s := int64(1); s <= journalCrashLines; {
		for _, run := range []string{"a", "b"} {
			n := int64(3)
			if run == "b" {
				n = 4
			}
			var ls []outbox.EventLine
			for k := s; k < s+n && k <= journalCrashLines; k++ {
				ls = append(ls, outbox.EventLine{Seq: k, Line: line(run, k)})
			}
			if len(ls) > 0 {
				if err := j.Append(ctx, run, ls); err != nil {
					t.Fatal(err)
				}
			}
		}
		s += 3
	}
	j.Close()
	path := filepath.Join(tmp, "consumer.db")
	env := []string{"INBOX_TEST_DB=" + path, "INBOX_TEST_JOURNAL=" + dir}
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 11))
	points := []string{faultpoint.InboxBeforeCommit, faultpoint.InboxAfterCommit, faultpoint.InboxBetweenBatches, inHandler}
	kills := 0
	for i := range 8 {
		point := points[i%len(points)]
		at := 1 + rng.IntN(8)
		if point == inHandler {
			at = 1 + rng.IntN(20)
		}
		err := crashtest.Child(t, "crash-journal-consumer", append(env, crashtest.KillAt(point, at)...)...).Run()
		switch {
		case crashtest.Killed(err):
			kills++
		case err != nil:
			t.Fatalf("consumer killed at %s #%d: %v", point, at, err)
		}
		// The registry never runs ahead of what the database committed.
		if reg, stored := registered(t, dir), storedJournalPosition(t, path, dir); reg > stored {
			t.Fatalf("after a kill at %s #%d: registered at %d, committed %d", point, at, reg, stored)
		}
	}
	if err := crashtest.Child(t, "crash-journal-consumer", env...).Run(); err != nil {
		t.Fatalf("the last consumer: %v", err)
	}
	if kills == 0 {
		t.Fatal("no consumer was killed")
	}
	d := rawDB(t, path)
	want := 2 * journalCrashLines
	if n := count(t, d, `SELECT count(*) FROM effects`); n != want {
		t.Errorf("%d effects after %d kills, want %d", n, kills, want)
	}
	if n := count(t, d, `SELECT count(*) FROM (SELECT DISTINCT run, seq FROM effects)`); n != want {
		t.Errorf("%d distinct effects, want %d", n, want)
	}
	bases, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(bases) < 4 {
		t.Fatalf("%d segments: the test wants several", len(bases))
	}
	var end int64
	for _, b := range bases {
		st, _ := os.Stat(b)
		end += st.Size()
	}
	if reg := registered(t, dir); reg != end {
		t.Errorf("registered at %d, the journal ends at %d", reg, end)
	}
}

func registered(t *testing.T, dir string) int64 {
	t.Helper()
	rs, err := journal.Readers(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Name == journalCrashReader {
			return r.Position
		}
	}
	return 0
}

func storedJournalPosition(t *testing.T, path, dir string) int64 {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return 0
	}
	var pos []byte
	err := rawDB(t, path).QueryRow(`SELECT position FROM inbox_sources WHERE name = ?`, inboxseam.JournalSourcePrefix+dir).Scan(&pos)
	if err == sql.ErrNoRows || pos == nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	jp, err := inbox.ParseJournalPosition(pos)
	if err != nil {
		t.Fatal(err)
	}
	return jp.Position
}
