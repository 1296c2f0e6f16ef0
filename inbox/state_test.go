package inbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// stateRows counts the rows of the inbox's per-run tables.
func stateRows(t testing.TB, d *sql.DB) (runs, digests int) {
	return count(t, d, `SELECT count(*) FROM inbox_runs`), count(t, d, `SELECT count(*) FROM inbox_digests`)
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
	for from := int64(1); from <= 100_000; from += batch {
		mustApply(t, in, lines("r", from, from+batch-1))
		if hwm := from + batch - 1; hwm%20_000 == 0 {
			runs, digests := stateRows(t, d)
			if runs != 1 || digests != inbox.DefaultDigestWindow {
				t.Errorf("after %d lines: %d run rows and %d digest rows, want 1 and %d", hwm, runs, digests, inbox.DefaultDigestWindow)
			}
		}
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
	if n := count(t, d, `SELECT count(*) FROM inbox_digests WHERE engine_run_id = 'old'`); n != 1 {
		t.Fatalf("the idle run keeps %d digests, want its last line's", n)
	}
	if n := count(t, d, `SELECT count(*) FROM inbox_digests WHERE engine_run_id = 'old' AND seq = 100`); n != 1 {
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
	// Runs idle for decades, each with a full window of digests, written straight into the tables.
	// Fewer under the race detector, which slows SQLite (compiled to Go) some 70 times here.
	runs, each := 10, 2000
	if outboxtest.RaceEnabled {
		runs, each = 4, 1100
	}
	w := rawDBRW(t, path)
	for r := range runs {
		run := fmt.Sprint("run", r)
		last := sha256.Sum256(line(run, int64(each)))
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO inbox_runs (engine_run_id, hwm, applied_at) VALUES (?, ?, 0)`, []any{run, each}},
			{`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			  INSERT INTO inbox_digests SELECT ?, i, zeroblob(32) FROM n`, []any{each - 1, run}},
			{`INSERT INTO inbox_digests VALUES (?, ?, ?)`, []any{run, each, last[:]}},
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
		if dropped := before - idle(); dropped > 4096 || dropped < 1 {
			t.Errorf("call %d dropped %d digests", calls, dropped)
		}
	}
	// At most 4 runs and 4,096 digests a call.
	if least := max((runs+3)/4, (runs*(each-1)+4095)/4096); calls < least || calls == 100 {
		t.Errorf("trimming took %d calls, at least %d", calls, least)
	}
	for r := range runs {
		run := fmt.Sprint("run", r)
		if n := count(t, d, `SELECT count(*) FROM inbox_digests WHERE engine_run_id = ? AND seq = ?`, run, each); n != 1 {
			t.Errorf("run %s lost its last line's digest", run)
		}
		if rep := mustApply(t, in, [][]byte{line(run, int64(each))}); rep.Duplicates != 1 {
			t.Errorf("run %s: its last line after the trim: %+v", run, rep)
		}
	}
}

func TestADigestMissingInsideTheWindowIsStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t, inbox.WithDigestWindow(4))
	mustApply(t, in, lines("r", 1, 10))
	in.Close()
	// The window raised across a reopen: seqs 3..6 are inside it now, their digests long dropped.
	in, err := inbox.Open(ctx, path, inbox.WithDigestWindow(8))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if rep := mustApply(t, in, append(lines("r", 3, 10), line("r", 5, "other"))); rep != (inbox.Report{Stale: 5, Duplicates: 4}) {
		t.Errorf("%+v", rep)
	}
	if qs := quarantined(t, in); len(qs) != 0 {
		t.Errorf("quarantined %v", qs)
	}
}

func TestHostileRunIDsAreKeptApartAndNeverMerged(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	long := strings.Repeat("é", 5000)
	ids := map[string]string{ // as written in JSON → the run id it decodes to
		`a`:            "a",
		`a\u0000b`:     "a\x00b",
		`a\u0001`:      "a\x01",
		`a\n`:          "a\n",
		`a\r`:          "a\r",
		`a\u007f`:      "a\x7f",
		`a\u2028`:      "a\u2028",
		`\u00e9`:       "é",
		`e\u0301`:      "e\u0301", // the same glyph as é, not the same run
		`\ud83d\ude00`: "😀",
		long:           long,
	}
	var call [][]byte
	for raw := range ids {
		call = append(call, []byte(`{"engine_run_id":"`+raw+`","seq":1}`))
	}
	// An escape that decodes to an id already seen continues that run.
	call = append(call, []byte(`{"engine_run_id":"\u0061","seq":2}`))
	rep, err := in.Apply(context.Background(), call, insertHandler)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != len(ids)+1 {
		t.Errorf("%+v", rep)
	}
	for _, id := range ids {
		want := int64(1)
		if id == "a" {
			want = 2
		}
		if p := position(t, in, id); p != want {
			t.Errorf("run %q at %d, want %d", id, p, want)
		}
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM inbox_runs`); n != len(ids) {
		t.Errorf("%d runs stored, want %d", n, len(ids))
	}
	// Invalid UTF-8 in the JSON, raw or in the run id, is malformed, never a run.
	for _, bad := range []string{"{\"engine_run_id\":\"a\x80\",\"seq\":3}", "{\"engine_run_id\":\"a\",\"seq\":3,\"x\":\"\xed\xa0\x80\"}"} {
		if _, err := in.Apply(context.Background(), [][]byte{[]byte(bad)}, insertHandler); !errors.Is(err, journal.ErrMalformed) {
			t.Errorf("%q: %v", bad, err)
		}
	}
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
