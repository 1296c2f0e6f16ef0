// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestRunsAndRecoverCoverMoreThanAHundredThousandRuns: a book with 100,000 runs holding only ledger rows
// and one more run of unprojected lines; Runs lists every run, and Recover projects the last run
// instead of deleting its lines.
func TestRunsAndRecoverCoverMoreThanAHundredThousandRuns(t *testing.T) {
	if outboxtest.RaceEnabled {
		t.Skip("walks 100,000 runs; make test runs it without the race detector")
	}
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	s.Close()
	d := outboxtest.RawDBRW(t, path)
	const ledgerRuns = 100_000
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	// Each ledger run was projected by a relay, which recorded its progress. Generated inside SQLite:
	// a statement per row costs minutes under the race detector.
	for _, q := range []string{
		`INSERT INTO events_outbox (engine_run_id, seq, line, once_key, announce_key)
		 WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
		 SELECT printf('ledger-%06d', i), 1, printf('{"engine_run_id":"ledger-%06d","seq":1}', i),
		        printf('kledger-%06d', i), printf('kledger-%06d', i) FROM n`,
		`INSERT INTO outbox_progress (engine_run_id, projected)
		 SELECT engine_run_id, 1 FROM events_outbox WHERE engine_run_id > ''`,
	} {
		if _, err := tx.Exec(strings.Replace(q, "?", fmt.Sprint(ledgerRuns), 1)); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		if _, err := tx.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('zz-last', ?, ?)`,
			seq, fmt.Sprintf(`{"engine_run_id":"zz-last","seq":%d}`, seq)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	s, err = outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := collect(s.AllRuns(ctx))
	if err != nil || len(runs) != ledgerRuns+1 || runs[len(runs)-1].RunID != "zz-last" {
		t.Fatalf("Runs: %d runs, %v; want %d ending with zz-last", len(runs), err, ledgerRuns+1)
	}
	n, err := s.LedgerSize(ctx)
	if err != nil || n != ledgerRuns {
		t.Errorf("LedgerSize: (%d, %v), want %d", n, err, ledgerRuns)
	}
	sink := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sink, "new").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got := sink.All()
	if len(got) != 3 || got[2].Seq != 3 {
		t.Errorf("Recover projected %d lines of the last run, want 3", len(got))
	}
	if p, _ := s.Projected(ctx, "zz-last"); p != 3 {
		t.Errorf("zz-last projected to %d, want 3", p)
	}
}

func TestRecoverNeverForgetsALiveRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		outboxtest.MustEnqueue(t, s, "a")
		outboxtest.MustEnqueue(t, s, "b")
	}
	sinkA := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sinkA, "b", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.FastRelay(t, s, sinkA, "a").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "b")); len(got) != 3 {
		t.Errorf("relay a's Recover left run b with rows %v, want all 3", got)
	}
	if p, _ := s.Projected(ctx, "b"); p != 3 {
		t.Errorf("run b's progress after relay a's Recover: %d, want 3", p)
	}
	if seq := outboxtest.MustEnqueue(t, s, "b"); seq != 4 {
		t.Errorf("run b's next seq: %d, want 4", seq)
	}
}
