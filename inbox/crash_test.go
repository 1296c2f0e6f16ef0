// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ncruces/go-sqlite3/vfs"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/internal/testing/faultvfs"
)

// The crash consumer's journal: crashBatches batches of crashBatch lines of each of two runs,
// interleaved, each batch beginning with the last lines of the one before it (a relay's
// re-delivery), read from a source whose position is the number of batches applied.
const (
	crashBatches = 30
	crashBatch   = 20
	crashSource  = "gen:crash"
	inHandler    = "inbox.test.in_handler"
)

func crashLines(k int) [][]byte {
	var ls [][]byte
	from := int64(k*crashBatch) + 1
	if k > 0 {
		from -= 3
	}
	for s := from; s <= int64(k+1)*crashBatch; s++ {
		ls = append(ls, line("a", s), line("b", s))
	}
	return ls
}

// crashConsumer applies the journal batch by batch from its stored position, its effects into a
// table without a key, so that a line applied twice would show; it dies where KillAt says.
func crashConsumer() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	in, err := inbox.Open(ctx, os.Getenv("INBOX_TEST_DB"))
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
	for {
		pos, err := in.SourcePosition(ctx, crashSource)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		k := 0
		if pos != nil {
			k, _ = strconv.Atoi(string(pos))
		}
		if k == crashBatches {
			return 0
		}
		if _, err := in.ApplyFrom(ctx, crashSource, pos, []byte(strconv.Itoa(k+1)), crashLines(k), h); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
}

func TestAConsumerKilledAtAnyStepOfApplyAppliesEveryLineOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "consumer.db")
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
	points := []string{faultpoint.InboxBeforeCommit, faultpoint.InboxAfterCommit, inHandler}
	kills := 0
	for i := range 6 {
		point := points[i%len(points)]
		at := 1 + rng.IntN(6)
		if point == inHandler {
			at = 1 + rng.IntN(6*2*crashBatch)
		}
		err := crashtest.Child(t, "crash-consumer", append([]string{"INBOX_TEST_DB=" + path}, crashtest.KillAt(point, at)...)...).Run()
		switch {
		case crashtest.Killed(err):
			kills++
		case err != nil:
			t.Fatalf("consumer killed at %s #%d: %v", point, at, err)
		}
	}
	if err := crashtest.Child(t, "crash-consumer", "INBOX_TEST_DB="+path).Run(); err != nil {
		t.Fatalf("the last consumer: %v", err)
	}
	if kills == 0 {
		t.Fatal("no consumer was killed")
	}
	d := rawDB(t, path)
	want := 2 * crashBatches * crashBatch
	if n := count(t, d, `SELECT count(*) FROM effects`); n != want {
		t.Errorf("%d effects after %d kills, want %d", n, kills, want)
	}
	if n := count(t, d, `SELECT count(*) FROM (SELECT DISTINCT run, seq FROM effects)`); n != want {
		t.Errorf("%d distinct effects, want %d", n, want)
	}
	for _, run := range []string{"a", "b"} {
		if n := count(t, d, `SELECT hwm FROM inbox_runs WHERE engine_run_id = ?`, run); n != crashBatches*crashBatch {
			t.Errorf("run %s at %d", run, n)
		}
	}
}

func TestEveryApplyThatReturnedSurvivesPowerLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := faultvfs.New()
	name := fmt.Sprintf("inbox-power-%d-%d", os.Getpid(), vfsSeq.Add(1))
	vfs.Register(name, v)
	in, path := setup(t, inbox.WithVFS(name))
	for k := range 5 {
		if _, err := in.ApplyFrom(ctx, crashSource, posOf(k), posOf(k+1), crashLines(k), insertHandler); err != nil {
			t.Fatal(err)
		}
	}
	v.PowerOff()
	in.Apply(ctx, crashLines(5), insertHandler) // fails: the power is gone
	in.Close()
	if err := v.Crash(); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("open after the power cut: %v", err)
	}
	defer in.Close()
	for _, run := range []string{"a", "b"} {
		if p := position(t, in, run); p != 5*crashBatch {
			t.Errorf("run %s at %d after the power cut, want %d", run, p, 5*crashBatch)
		}
	}
	if pos, _ := in.SourcePosition(ctx, crashSource); string(pos) != "5" {
		t.Errorf("source at %q", pos)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 2*5*crashBatch {
		t.Errorf("%d effects", n)
	}
}

func posOf(k int) []byte {
	if k == 0 {
		return nil
	}
	return []byte(strconv.Itoa(k))
}
