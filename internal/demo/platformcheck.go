// SPDX-License-Identifier: Apache-2.0

package demo

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/textmachine/outbox/journal"
)

// PlatformResult is what CheckPlatform found in the platform's database, beside the book and the
// journal.
type PlatformResult struct {
	VerifyErr error // the journal's gap, conflict or malformed line; nil when clean

	Units      int   // rows of platform_units: units the platform counted
	UnitsTwice int   // units with more than one row
	BookUnits  int   // units the book says are done
	Spend      int64 // cents the platform summed
	BookSpend  int64 // cents in the book's spend table

	Runs         int      // runs in the journal
	Lines        int      // the journal's distinct lines
	Effects      int      // rows of platform_effects
	AppliedTwice int      // distinct lines with more than one effect row
	Skipped      int      // distinct lines of the journal with no effect row
	Foreign      int      // effect rows of a (run, seq) the journal does not hold
	MarksOff     []string // runs whose inbox high-water mark is not their last seq in the journal
	Quarantined  int      // runs the inbox holds in quarantine
	Integrity    string   // the platform database's integrity_check
}

// OK reports whether the platform holds exactly what the journal and the book say.
func (r PlatformResult) OK() bool { return len(r.Problems()) == 0 }

// Problems lists what failed, for a message.
func (r PlatformResult) Problems() []string {
	var p []string
	add := func(cond bool, format string, a ...any) {
		if cond {
			p = append(p, fmt.Sprintf(format, a...))
		}
	}
	add(r.VerifyErr != nil, "journal: %v", r.VerifyErr)
	add(r.Units != r.BookUnits, "platform: %d units, the book %d", r.Units, r.BookUnits)
	add(r.UnitsTwice != 0, "platform: %d units counted more than once", r.UnitsTwice)
	add(r.Spend != r.BookSpend, "platform: spend %d cents, the book %d", r.Spend, r.BookSpend)
	add(r.AppliedTwice == 1, "platform: 1 line applied more than once")
	add(r.AppliedTwice > 1, "platform: %d lines applied more than once", r.AppliedTwice)
	add(r.Skipped != 0, "platform: %d of %d lines never applied", r.Skipped, r.Lines)
	add(r.Foreign != 0, "platform: %d effects of lines the journal does not hold", r.Foreign)
	add(len(r.MarksOff) != 0, "platform: the high-water mark of %d runs is not their last seq in the journal (%s)",
		len(r.MarksOff), firstFew(r.MarksOff))
	add(r.Quarantined != 0, "platform: %d runs quarantined", r.Quarantined)
	add(r.Integrity != "ok", "platform integrity_check: %s", r.Integrity)
	return p
}

func firstFew(s []string) string {
	if len(s) > 3 {
		return fmt.Sprintf("%q and %d more", s[:3], len(s)-3)
	}
	return fmt.Sprintf("%q", s)
}

// CheckPlatform compares the platform's database with the journal and the book, reading each for
// itself: the journal with journal.Verify and a scan of its distinct lines, both databases read-only
// with plain SQL, the inbox's own table of high-water marks included, never through the inbox. For
// every run, the effects must be the journal's distinct lines, each once; its high-water mark its
// last seq; the units the platform counted and the spend it summed the book's.
func CheckPlatform(ctx context.Context, platformDB, bookDB, journalPath string) (PlatformResult, error) {
	var res PlatformResult
	last, err := journalKeys(ctx, journalPath, &res)
	if err != nil {
		return res, err
	}
	book, err := openRead(ctx, bookDB)
	if err != nil {
		return res, err
	}
	defer book.Close()
	if err := book.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM units), (SELECT COALESCE(SUM(cents), 0) FROM spend)`).
		Scan(&res.BookUnits, &res.BookSpend); err != nil {
		return res, fmt.Errorf("demo: read the book: %w", err)
	}
	d, err := openRead(ctx, platformDB)
	if err != nil {
		return res, err
	}
	defer d.Close()
	if err := d.QueryRowContext(ctx, `SELECT count(*), count(*) - count(DISTINCT unit) FROM platform_units`).
		Scan(&res.Units, &res.UnitsTwice); err != nil {
		return res, fmt.Errorf("demo: read the platform's units: %w", err)
	}
	if err := d.QueryRowContext(ctx, `SELECT COALESCE(SUM(cents), 0) FROM platform_spend`).Scan(&res.Spend); err != nil {
		return res, fmt.Errorf("demo: read the platform's spend: %w", err)
	}
	if err := compareEffects(ctx, d, last, &res); err != nil {
		return res, err
	}
	if err := compareMarks(ctx, d, last, &res); err != nil {
		return res, err
	}
	if err := d.QueryRowContext(ctx, `SELECT count(*) FROM inbox_quarantine`).Scan(&res.Quarantined); err != nil {
		return res, fmt.Errorf("demo: read the quarantine: %w", err)
	}
	if err := d.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res.Integrity); err != nil {
		return res, fmt.Errorf("demo: integrity_check: %w", err)
	}
	return res, nil
}

// lineKey is a journal line's (run, seq).
type lineKey struct {
	run string
	seq int64
}

// journalKeys verifies the journal and returns its distinct lines, each run's mapped to its seqs.
func journalKeys(ctx context.Context, path string, res *PlatformResult) (map[string]map[int64]bool, error) {
	if _, res.VerifyErr = verifyJournal(ctx, path); res.VerifyErr != nil {
		var ve *journal.Error
		if !errors.As(res.VerifyErr, &ve) {
			return nil, res.VerifyErr // an I/O error, not a finding
		}
	}
	f, err := openLines(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	runs := map[string]map[int64]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l demoLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Run == "" {
			continue // Verify has said it
		}
		if runs[l.Run] == nil {
			runs[l.Run] = map[int64]bool{}
		}
		if !runs[l.Run][l.Seq] {
			runs[l.Run][l.Seq] = true
			res.Lines++
		}
	}
	res.Runs = len(runs)
	return runs, sc.Err()
}

// compareEffects counts the effect rows of each (run, seq) against the journal's distinct lines.
func compareEffects(ctx context.Context, d *sql.DB, journal map[string]map[int64]bool, res *PlatformResult) error {
	rows, err := d.QueryContext(ctx, `SELECT run, seq, count(*) FROM platform_effects GROUP BY run, seq`)
	if err != nil {
		return fmt.Errorf("demo: read the platform's effects: %w", err)
	}
	defer rows.Close()
	seen := map[lineKey]bool{}
	for rows.Next() {
		var k lineKey
		var n int
		if err := rows.Scan(&k.run, &k.seq, &n); err != nil {
			return err
		}
		res.Effects += n
		seen[k] = true
		switch {
		case !journal[k.run][k.seq]:
			res.Foreign += n
		case n > 1:
			res.AppliedTwice++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for run, seqs := range journal {
		for seq := range seqs {
			if !seen[lineKey{run, seq}] {
				res.Skipped++
			}
		}
	}
	return nil
}

// compareMarks compares each run's high-water mark in the inbox's table with its last seq in the
// journal, for the runs of either.
func compareMarks(ctx context.Context, d *sql.DB, journal map[string]map[int64]bool, res *PlatformResult) error {
	rows, err := d.QueryContext(ctx, `SELECT engine_run_id, hwm FROM inbox_runs`)
	if err != nil {
		return fmt.Errorf("demo: read the inbox's runs: %w", err)
	}
	defer rows.Close()
	marks := map[string]int64{}
	for rows.Next() {
		var run string
		var hwm int64
		if err := rows.Scan(&run, &hwm); err != nil {
			return err
		}
		marks[run] = hwm
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for run, seqs := range journal {
		var last int64
		for seq := range seqs {
			last = max(last, seq)
		}
		if marks[run] != last {
			res.MarksOff = append(res.MarksOff, run)
		}
	}
	for run := range marks {
		if journal[run] == nil {
			res.MarksOff = append(res.MarksOff, run)
		}
	}
	slices.Sort(res.MarksOff)
	return nil
}
