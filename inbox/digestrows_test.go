// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pressly/goose/v3"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/inbox/migrations"
)

// gooseCLI is the inbox's migrations as the goose CLI runs them at deploy time: the files on disk,
// the inbox's own version table.
func gooseCLI(t *testing.T, d *sql.DB) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectSQLite3, d, os.DirFS("migrations"),
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(migrations.TableName))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// digestTable lists what inbox_digests holds, in key order, whatever its shape.
func digestTable(t *testing.T, d *sql.DB) []string {
	t.Helper()
	rows, err := d.Query(`SELECT * FROM inbox_digests ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, cmp.Diff(nil, vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTheDigestsMigrationCarriesEveryDigestOverUpAndDown: a run whose window spans several rows, one
// with seqs given up by an accepted gap inside a row, and one trimmed to its last digest go down to
// a row per digest and up again unchanged, and the inbox goes on deciding their lines as before.
func TestTheDigestsMigrationCarriesEveryDigestOverUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t, inbox.WithDigestRetention(time.Nanosecond))
	mustApply(t, in, lines("old", 1, 30))
	time.Sleep(time.Millisecond)
	mustApply(t, in, append(lines("gap", 1, 5), line("gap", 9))) // trims "old" to its last digest
	in.Close()
	in, err := inbox.Open(ctx, path, inbox.WithDigestWindow(40))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.AcceptGap(ctx, "gap", "lost"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, in, lines("gap", 9, 12))
	mustApply(t, in, lines("long", 1, 100))
	mustApply(t, in, append(nulRun(1, 3), lines("a", 1, 3)...)) // two runs that a C string would merge
	in.Close()

	d := rawDBRW(t, path)
	before := digestTable(t, d)
	if got, ok := storedDigest(t, d, "gap", 7); !ok || string(got) != string(make([]byte, 32)) {
		t.Fatalf("a seq given up inside a row: %x, %v; want zeros", got, ok)
	}
	p := gooseCLI(t, d)
	if _, err := p.DownTo(ctx, 1); err != nil {
		t.Fatalf("down: %v", err)
	}
	// A row per digest kept, none for the seqs given up.
	want := map[string][]int64{"old": {30}, "gap": {1, 2, 3, 4, 5, 9, 10, 11, 12}, "a": {1, 2, 3}, "a\x00b": {1, 2, 3}}
	for s := int64(49); s <= 100; s++ { // the window (60, 100] in whole rows of 16: from 49
		want["long"] = append(want["long"], s)
	}
	for run, seqs := range want {
		rows, err := d.Query(`SELECT seq, digest FROM inbox_digests WHERE engine_run_id = ? ORDER BY seq`, run)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for rows.Next() {
			var s int64
			var dg []byte
			if err := rows.Scan(&s, &dg); err != nil {
				t.Fatal(err)
			}
			l := line(run, s)
			if run == "a\x00b" {
				l = nulRun(s, s)[0]
			}
			if string(dg) != string(sha256Of(l)) {
				t.Errorf("run %s seq %d: digest %x", run, s, dg)
			}
			got = append(got, s)
		}
		rows.Close()
		if diff := cmp.Diff(seqs, got); diff != "" {
			t.Errorf("run %s after down (-want +got):\n%s", run, diff)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if diff := cmp.Diff(before, digestTable(t, d)); diff != "" {
		t.Errorf("down and up changed the digests (-before +after):\n%s", diff)
	}
	d.Close()

	in, err = inbox.Open(ctx, path, inbox.WithDigestWindow(40))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for _, c := range []struct {
		name  string
		lines [][]byte
		want  inbox.Report
	}{
		{"kept digests", append(append(lines("long", 61, 100), line("old", 30)), lines("gap", 1, 5)...), inbox.Report{Duplicates: 46}},
		{"runs apart", append(lines("a", 1, 3), nulRun(1, 3)...), inbox.Report{Duplicates: 6}},
		{"seqs given up and older lines", append(lines("gap", 6, 8), lines("old", 1, 29)...), inbox.Report{Stale: 32}},
		{"the next lines", [][]byte{line("long", 101), line("old", 31), line("gap", 13)}, inbox.Report{Applied: 3}},
	} {
		if rep := mustApply(t, in, c.lines); rep != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, rep, c.want)
		}
	}
	mustApply(t, in, [][]byte{line("gap", 10, "other")})
	if qs := quarantined(t, in); len(qs) != 1 || qs[0].RunID != "gap" || qs[0].Reason != "conflict" {
		t.Errorf("other bytes under a kept seq: %v", qs)
	}
}

// nulRun renders lines from..to of the run "a\x00b", whose id holds a NUL.
func nulRun(from, to int64) [][]byte {
	var out [][]byte
	for s := from; s <= to; s++ {
		out = append(out, fmt.Appendf(nil, `{"engine_run_id":"a\u0000b","seq":%d,"type":"t","data":""}`, s))
	}
	return out
}
