// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/crashtest"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// twoUnrecordedUnits is how many once keys the engine below announces, in batches of 10.
const twoUnrecordedUnits = 20

// lockingSink appends to a journal and, once its first batch is in, takes the book's write lock from
// a connection of its own and keeps it: the relay's record of that batch then waits, and the next
// batch goes out beside it.
type lockingSink struct {
	j    *journal.File
	book string
	once sync.Once
	err  error
}

func (l *lockingSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if err := l.j.Append(ctx, runID, lines); err != nil {
		return err
	}
	l.once.Do(func() {
		d, err := sql.Open("sqlite3", "file:"+l.book)
		if err == nil {
			var tx *sql.Tx
			if tx, err = d.Begin(); err == nil {
				_, err = tx.Exec(`UPDATE outbox_progress SET projected = projected WHERE 0`)
			}
		}
		l.err = err
	})
	return l.err
}

// twoUnrecordedEngine announces twoUnrecordedUnits once keys and projects them with a record that
// cannot commit, so that it is killed while the second batch is being written (KillAt
// JournalBeforeSync 2) and the first one's record is in flight: both batches are in the journal and
// neither is recorded.
func twoUnrecordedEngine() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	dir := os.Getenv("DIR")
	book := filepath.Join(dir, "book.db")
	s, err := outbox.Open(ctx, book, outbox.WithBusyTimeout(time.Minute))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	for i := range twoUnrecordedUnits {
		key := fmt.Sprintf("unit-%d", i)
		if _, _, err := s.EnqueueOnce(ctx, "engine-1", key, journal.Builder("engine-1", "done", key)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	r, err := outbox.NewRelay(s, &lockingSink{j: j, book: book}, "engine-1", outbox.WithBatchSize(10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	err = r.Flush(ctx)
	fmt.Fprintf(os.Stderr, "the engine was not killed: Flush: %v\n", err)
	return 4
}

// An engine killed with two batches of once keys in the journal and neither recorded (killed while the
// second is appended, the first one's record waiting for the write lock beside it): the next start's Recover re-sends
// both, byte for byte, and moves every key into the ledger, so that none is announced again.
func TestAKillWithTwoUnrecordedBatchesOfOnceKeysAnnouncesNoKeyTwice(t *testing.T) {
	dir := t.TempDir()
	err := crashtest.Child(t, "two-unrecorded-engine",
		append(crashtest.KillAt(faultpoint.JournalBeforeSync, 2), "DIR="+dir)...).Run()
	if !crashtest.Killed(err) {
		t.Fatalf("the engine: %v, want killed", err)
	}
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p, err := s.Projected(ctx, "engine-1"); err != nil || p != 0 {
		t.Fatalf("the killed engine's run is recorded up to %d (%v), want 0: both batches unrecorded", p, err)
	}
	j, err := journal.OpenFile(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	r, err := outbox.NewRelay(s, j, "engine-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Lines != twoUnrecordedUnits || rep.Duplicates != twoUnrecordedUnits {
		t.Errorf("the journal holds %d lines and %d duplicates, want %d and %d: both batches re-sent once",
			rep.Lines, rep.Duplicates, twoUnrecordedUnits, twoUnrecordedUnits)
	}
	for i := range twoUnrecordedUnits {
		key := fmt.Sprintf("unit-%d", i)
		if ok, _, err := s.EnqueueOnce(ctx, "engine-2", key, journal.Builder("engine-2", "done", key)); err != nil || ok {
			t.Errorf("EnqueueOnce %s after the restart: announcing %v, %v; want false", key, ok, err)
		}
	}
}
