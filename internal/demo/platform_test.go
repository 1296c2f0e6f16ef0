// SPDX-License-Identifier: Apache-2.0

package demo_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/testing/dirstate"
)

// finishedPlatform works a book of units with one engine start and applies its journal into a
// platform database; it returns the three paths.
func finishedPlatform(t *testing.T, units int) (platformDB, bookDB, journalPath string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	bookDB, journalPath, platformDB = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "platform.db")
	if err := demo.RunEngine(ctx, demo.EngineConfig{DB: bookDB, Journal: journalPath, Units: units, RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	var batches inbox.Report
	if err := demo.RunPlatform(ctx, demo.PlatformConfig{DB: platformDB, Journal: journalPath, BatchLines: 7,
		Batch: func(r inbox.Report) { batches.Applied += r.Applied }}); err != nil {
		t.Fatal(err)
	}
	if want := 2*units + 1; batches.Applied != want {
		t.Fatalf("the batch reports add up to %d applied lines, want %d", batches.Applied, want)
	}
	return platformDB, bookDB, journalPath
}

func TestThePlatformCountsEachUnitOnceAndSumsTheBooksSpend(t *testing.T) {
	t.Parallel()
	const units = 30
	platformDB, bookDB, journalPath := finishedPlatform(t, units)
	res, err := demo.CheckPlatform(context.Background(), platformDB, bookDB, journalPath)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("problems: %v", res.Problems())
	}
	var spend int64
	for u := 1; u <= units; u++ {
		spend += demo.Cents(u)
	}
	if res.Units != units || res.Spend != spend || res.Lines != 2*units+1 || res.Effects != res.Lines || res.Runs != 1 {
		t.Errorf("%+v, want %d units, %d cents, %d lines each applied once", res, units, spend, 2*units+1)
	}
	// A second start applies nothing more.
	if err := demo.RunPlatform(context.Background(), demo.PlatformConfig{DB: platformDB, Journal: journalPath}); err != nil {
		t.Fatal(err)
	}
	if again, err := demo.CheckPlatform(context.Background(), platformDB, bookDB, journalPath); err != nil || !again.OK() || again.Effects != res.Effects {
		t.Errorf("after a second start: %v %v, %d effects", err, again.Problems(), again.Effects)
	}
}

func TestCheckPlatformFindsEveryKindOfTampering(t *testing.T) {
	t.Parallel()
	platformDB, bookDB, journalPath := finishedPlatform(t, 10)
	for name, c := range map[string]struct {
		sql  string
		want string
	}{
		"a line applied twice":           {`INSERT INTO platform_effects SELECT * FROM platform_effects LIMIT 1`, "1 line applied more than once"},
		"a line never applied":           {`DELETE FROM platform_effects WHERE rowid = (SELECT max(rowid) FROM platform_effects)`, "1 of 21 lines never applied"},
		"an effect of no journal line":   {`INSERT INTO platform_effects VALUES ('ghost', 1, 'spend')`, "1 effects of lines the journal does not hold"},
		"a unit counted twice":           {`INSERT INTO platform_units SELECT * FROM platform_units LIMIT 1`, "1 units counted more than once"},
		"a unit not counted":             {`DELETE FROM platform_units WHERE unit = 3`, "9 units, the book 10"},
		"a spend changed":                {`UPDATE platform_spend SET cents = cents + 1 WHERE unit = 2`, "spend 2046 cents, the book 2045"},
		"a high-water mark behind":       {`UPDATE inbox_runs SET hwm = hwm - 1`, "not their last seq in the journal ([\"run-1\"])"},
		"a high-water mark of no run":    {`INSERT INTO inbox_runs (engine_run_id, hwm, applied_at) VALUES ('ghost', 1, 0)`, "([\"ghost\"])"},
		"a run parked in the quarantine": {`INSERT INTO inbox_quarantine VALUES ('run-1', 'gap', 22, 23, '', 0)`, "1 runs quarantined"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			copyDB := filepath.Join(t.TempDir(), "platform.db")
			dirstate.CopyFile(t, platformDB, copyDB, 0o644)
			d, err := sql.Open("sqlite3", "file:"+copyDB)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Exec(c.sql); err != nil {
				t.Fatal(err)
			}
			d.Close()
			res, err := demo.CheckPlatform(context.Background(), copyDB, bookDB, journalPath)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() || !strings.Contains(strings.Join(res.Problems(), "; "), c.want) {
				t.Errorf("problems %q, want one saying %q", res.Problems(), c.want)
			}
		})
	}
}
