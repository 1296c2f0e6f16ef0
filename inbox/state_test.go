// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// stateRows counts the rows of the inbox's per-run tables, and the digests their rows hold.
func stateRows(t testing.TB, d *sql.DB) (runs, digestRows, digests int) {
	return count(t, d, `SELECT count(*) FROM inbox_runs`), count(t, d, `SELECT count(*) FROM inbox_digests`), digestsKept(t, d, "")
}

// TestTheStateOfARunIsConstantAfterAHundredThousandLines; make test runs it without the race
// detector, under which SQLite (compiled to Go) runs about 15 times slower.
func TestTheStateOfARunIsConstantAfterAHundredThousandLines(t *testing.T) {
	if outboxtest.RaceEnabled {
		t.Skip("applies 100,000 lines; make test runs it without the race detector")
	}
	t.Parallel()
	in, path := setup(t, inbox.WithDurability(outbox.DurabilityNormal))
	d := rawDB(t, path)
	const batch = 2000
	firstRows := 0
	for from := int64(1); from <= 100_000; from += batch {
		mustApply(t, in, lines("r", from, from+batch-1))
		if hwm := from + batch - 1; hwm%20_000 == 0 {
			// The window is a whole number of digest rows and so is every 20,000th line: the rows hold
			// exactly the window.
			runs, rows, digests := stateRows(t, d)
			if firstRows == 0 {
				firstRows = rows
			}
			if runs != 1 || digests != inbox.DefaultDigestWindow || rows != firstRows {
				t.Errorf("after %d lines: %d run rows and %d digests in %d rows, want 1 and %d in %d", hwm, runs, digests, rows,
					inbox.DefaultDigestWindow, firstRows)
			}
		}
	}
	if firstRows == 0 || firstRows > inbox.DefaultDigestWindow/8 {
		t.Errorf("the window's %d digests take %d rows", inbox.DefaultDigestWindow, firstRows)
	}
	if p := position(t, in, "r"); p != 100_000 {
		t.Errorf("position %d", p)
	}
	if n := count(t, d, `SELECT count(*) FROM inbox_quarantine`) + count(t, d, `SELECT count(*) FROM inbox_sources`); n != 0 {
		t.Errorf("%d other rows", n)
	}
}

func TestARunIdlePastTheRetentionKeepsOnlyItsHighWaterMarkAndLastDigest(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithDigestRetention(time.Nanosecond))
	mustApply(t, in, lines("old", 1, 100))
	time.Sleep(time.Millisecond) // so that the next call's clock is past the retention
	mustApply(t, in, lines("new", 1, 1))
	d := rawDB(t, path)
	if n := digestsKept(t, d, "old"); n != 1 {
		t.Fatalf("the idle run keeps %d digests, want its last line's", n)
	}
	if got, ok := storedDigest(t, d, "old", 100); !ok || string(got) != string(sha256Of(line("old", 100))) {
		t.Error("the last line's digest is gone")
	}
	// A repeat of its older lines is Stale; its last line is still a duplicate, or a conflict.
	if rep := mustApply(t, in, lines("old", 1, 101)); rep != (inbox.Report{Stale: 99, Duplicates: 1, Applied: 1}) {
		t.Errorf("after the trim: %+v", rep)
	}
	mustApply(t, in, [][]byte{line("old", 101, "other")})
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Reason != "conflict" {
		t.Errorf("a conflict at the last line after the trim: %v", qs)
	}
}

func TestRetentionTrimmingIsBoundedPerCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	in.Close()
	// Runs idle for decades, each with a full window of digests, written straight into the tables in
	// rows of 16. Fewer under the race detector, which slows SQLite (compiled to Go) some 70 times here.
	runs, each := 10, 2000
	if outboxtest.RaceEnabled {
		runs, each = 4, 1104
	}
	rowsEach := each / 16
	w := rawDBRW(t, path)
	for r := range runs {
		run := fmt.Sprint("run", r)
		last := sha256.Sum256(line(run, int64(each)))
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO inbox_runs (engine_run_id, hwm, applied_at) VALUES (?, ?, 0)`, []any{run, each}},
			{`WITH RECURSIVE n(c) AS (SELECT 0 UNION ALL SELECT c + 1 FROM n WHERE c + 1 < ?)
			  INSERT INTO inbox_digests SELECT ?, c, c * 16 + 1, randomblob(512) FROM n`, []any{rowsEach - 1, run}},
			{`INSERT INTO inbox_digests VALUES (?, ?, ?, CAST(randomblob(480) || ? AS BLOB))`, []any{run, rowsEach - 1, each - 15, last[:]}},
		} {
			if _, err := w.Exec(q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	d := rawDB(t, path)
	idle := func() int { return count(t, d, `SELECT count(*) FROM inbox_digests WHERE engine_run_id LIKE 'run%'`) }
	calls := 0
	for ; idle() > runs && calls < 100; calls++ {
		before := idle()
		mustApply(t, in, lines("active", int64(calls)+1, int64(calls)+1))
		if dropped := before - idle(); dropped > 4096/16 || dropped < 1 {
			t.Errorf("call %d dropped %d rows of digests", calls, dropped)
		}
	}
	// At most 4 runs and 256 rows (4,096 digests) a call.
	if least := max((runs+3)/4, (runs*(rowsEach-1)+255)/256); calls < least || calls == 100 {
		t.Errorf("trimming took %d calls, at least %d", calls, least)
	}
	mustApply(t, in, lines("active", int64(calls)+1, int64(calls)+1)) // the last runs' rows shrink
	for r := range runs {
		run := fmt.Sprint("run", r)
		if got, ok := storedDigest(t, d, run, int64(each)); !ok || string(got) != string(sha256Of(line(run, int64(each)))) {
			t.Errorf("run %s lost its last line's digest", run)
		}
		if n := digestsKept(t, d, run); n != 1 {
			t.Errorf("run %s keeps %d digests, want 1", run, n)
		}
		if rep := mustApply(t, in, [][]byte{line(run, int64(each))}); rep.Duplicates != 1 {
			t.Errorf("run %s: its last line after the trim: %+v", run, rep)
		}
	}
}

// sha256Of is a line's digest as the inbox stores it.
func sha256Of(l []byte) []byte {
	d := sha256.Sum256(l)
	return d[:]
}

func TestALineEndingInCRIsTakenAsVerifyTakesIt(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	crlf := append(line("r", 1), '\r')
	var got []byte
	rep, err := in.Apply(context.Background(), [][]byte{crlf}, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		got = ev.Line
		return nil
	})
	if err != nil || rep.Applied != 1 {
		t.Fatal(rep, err)
	}
	if !bytes.Equal(got, crlf) {
		t.Errorf("the handler got %q, want the line with its \\r", got)
	}
	if rep := mustApply(t, in, [][]byte{crlf}); rep.Duplicates != 1 {
		t.Errorf("the same line again: %+v", rep)
	}
	// Without its \r it is other bytes, as the verifier says of the same journal.
	_, verr := journal.Verify(bytes.NewReader(append(append(crlf, '\n'), append(line("r", 1), '\n')...)))
	if !errors.Is(verr, journal.ErrPayloadConflict) {
		t.Fatalf("journal.Verify: %v", verr)
	}
	mustApply(t, in, [][]byte{line("r", 1)})
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].Reason != "conflict" {
		t.Errorf("quarantined %v", qs)
	}
}

func TestRetentionTrimKeepsTheLastDigestAndMakesTheRestStale(t *testing.T) {
	in, path := setup(t, inbox.WithDigestRetention(time.Millisecond))
	mustApply(t, in, lines("r", 1, 50))
	time.Sleep(20 * time.Millisecond)
	// other runs' calls do the trimming
	for i := 0; i < 5; i++ {
		mustApply(t, in, lines(fmt.Sprintf("o%d", i), 1, 1))
		time.Sleep(2 * time.Millisecond)
	}
	if n := digestsKept(t, rawDB(t, path), "r"); n > 16 {
		t.Logf("digests kept for r: %d (trim is bounded per call)", n)
	}
	if rep := applyOne(t, in, line("r", 50)); rep != (inbox.Report{Duplicates: 1}) {
		t.Fatalf("last line: %+v, want duplicate", rep)
	}
	for _, seq := range []int64{49, 10, 1} {
		for _, body := range []string{"", "x"} {
			rep := applyOne(t, in, line("r", seq, body))
			if rep == (inbox.Report{Quarantined: 1}) {
				t.Fatalf("seq %d body %q quarantined the run", seq, body)
			}
			if body == "x" && rep != (inbox.Report{Stale: 1}) {
				t.Fatalf("seq %d other bytes: %+v", seq, rep)
			}
		}
	}
	if rep := applyOne(t, in, line("r", 50, "x")); rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("last line other bytes: %+v, want conflict", rep)
	}
}

func TestAnIdleRunKeepsOnlyItsLastDigestOnceTrimmed(t *testing.T) {
	in, path := setup(t, inbox.WithDigestRetention(time.Millisecond))
	mustApply(t, in, lines("r", 1, 50))
	time.Sleep(10 * time.Millisecond)
	for i := 0; i < 3; i++ {
		mustApply(t, in, lines(fmt.Sprintf("o%d", i), 1, 1))
	}
	if n := digestsKept(t, rawDB(t, path), "r"); n != 1 {
		t.Fatalf("%d digests kept for the idle run", n)
	}
	if rep := applyOne(t, in, line("r", 50)); rep != (inbox.Report{Duplicates: 1}) {
		t.Fatalf("%+v", rep)
	}
	// the run wakes up and its window fills again from its mark (no call after it to trim it)
	mustApply(t, in, lines("r", 51, 60))
	if n := digestsKept(t, rawDB(t, path), "r"); n != 11 {
		t.Fatalf("%d digests kept after the run woke up, want 50..60", n)
	}
}
