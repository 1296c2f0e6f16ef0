// SPDX-License-Identifier: Apache-2.0

package demo

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// Result is what Check found in a finished book.
type Result struct {
	Report    journal.Report
	VerifyErr error // a gap, a conflict or a malformed line; nil when clean

	Units            int   // the book's size
	UnitsDone        int   // units the database says are done
	Announced        int   // units with exactly one distinct unit_done line
	AnnouncedTwice   int   // units with more than one distinct unit_done line
	SpendLinesTwice  int   // units with more than one distinct spend line
	SpendDB          int64 // cents in the spend table
	SpendJournal     int64 // cents in the journal's distinct spend lines
	CommittedChecked int   // committed events (from EngineConfig.Committed) looked for
	CommittedMissing int   // of those, how many the journal lacks
	Integrity        string
}

// OK reports whether every guarantee held.
func (r Result) OK() bool {
	return r.VerifyErr == nil && !r.Report.TornTail && r.UnitsDone == r.Units && r.Announced == r.Units &&
		r.AnnouncedTwice == 0 && r.SpendLinesTwice == 0 && r.SpendDB == r.SpendJournal &&
		r.CommittedMissing == 0 && r.Integrity == "ok"
}

// Problems lists what failed, for a message.
func (r Result) Problems() []string {
	var p []string
	add := func(cond bool, format string, a ...any) {
		if cond {
			p = append(p, fmt.Sprintf(format, a...))
		}
	}
	add(r.VerifyErr != nil, "journal: %v", r.VerifyErr)
	add(r.Report.TornTail, "journal ends in a torn line")
	add(r.UnitsDone != r.Units, "%d of %d units done", r.UnitsDone, r.Units)
	add(r.Announced != r.Units, "%d of %d units announced exactly once", r.Announced, r.Units)
	add(r.AnnouncedTwice != 0, "%d units announced more than once", r.AnnouncedTwice)
	add(r.SpendLinesTwice != 0, "%d units with two spend lines", r.SpendLinesTwice)
	add(r.SpendDB != r.SpendJournal, "spend: database %d, journal %d", r.SpendDB, r.SpendJournal)
	add(r.CommittedMissing != 0, "%d of %d committed events missing from the journal", r.CommittedMissing, r.CommittedChecked)
	add(r.Integrity != "ok", "integrity_check: %s", r.Integrity)
	return p
}

// Check verifies the journal and compares it with the database: no gap, no conflict; every unit
// done, spent once and announced exactly once (after duplicates are removed); the journal's spend
// equal to the database's; every event in the committed log present.
func Check(ctx context.Context, dbPath, journalPath string, units int, committedLog string) (Result, error) {
	res := Result{Units: units}
	res.Report, res.VerifyErr = verifyJournal(ctx, journalPath)
	var ve *journal.Error
	if res.VerifyErr != nil && !errors.As(res.VerifyErr, &ve) {
		return res, res.VerifyErr // an I/O error, not a finding
	}
	f, err := openLines(journalPath)
	if err != nil {
		return res, err
	}
	defer f.Close()
	type key struct {
		run string
		seq int64
	}
	seen := map[key]bool{}
	doneLines, spendLines := map[int]int{}, map[int]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l struct {
			Run  string `json:"engine_run_id"`
			Seq  int64  `json:"seq"`
			Type string `json:"type"`
			Data struct {
				Unit   int   `json:"unit"`
				Amount int64 `json:"amount"`
			} `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || seen[key{l.Run, l.Seq}] {
			continue
		}
		seen[key{l.Run, l.Seq}] = true
		switch l.Type {
		case "unit_done":
			doneLines[l.Data.Unit]++
		case "spend":
			spendLines[l.Data.Unit]++
			res.SpendJournal += l.Data.Amount
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	for _, n := range doneLines {
		switch {
		case n == 1:
			res.Announced++
		case n > 1:
			res.AnnouncedTwice++
		}
	}
	for _, n := range spendLines {
		if n > 1 {
			res.SpendLinesTwice++
		}
	}

	if committedLog != "" {
		b, err := os.ReadFile(committedLog)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			run, seqText, ok := strings.Cut(line, " ")
			seq, err := strconv.ParseInt(seqText, 10, 64)
			if !ok || err != nil {
				continue // the last line of a killed writer may be torn
			}
			res.CommittedChecked++
			if !seen[key{run, seq}] {
				res.CommittedMissing++
			}
		}
	}

	d, err := openRead(ctx, dbPath)
	if err != nil {
		return res, err
	}
	defer d.Close()
	if err := d.QueryRowContext(ctx, `SELECT count(*) FROM units`).Scan(&res.UnitsDone); err != nil {
		return res, fmt.Errorf("demo: count units: %w", err)
	}
	if err := d.QueryRowContext(ctx, `SELECT COALESCE(SUM(cents), 0) FROM spend`).Scan(&res.SpendDB); err != nil {
		return res, fmt.Errorf("demo: sum spend: %w", err)
	}
	if err := d.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res.Integrity); err != nil {
		return res, fmt.Errorf("demo: integrity_check: %w", err)
	}
	return res, nil
}

// verifyJournal verifies a journal directory (journal.VerifyDir, which also checks that each segment
// begins where the one before it ends) or a single journal file.
func verifyJournal(ctx context.Context, path string) (journal.Report, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return journal.VerifyDir(ctx, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return journal.Report{}, err
	}
	defer f.Close()
	return journal.Verify(f)
}

// openLines reads a journal's lines in order: a directory's segments one after the other (what
// cat DIR/*.jsonl reads), or the single file.
func openLines(path string) (io.ReadCloser, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return os.Open(path)
	}
	segs, err := journal.SegmentsOf(path)
	if err != nil {
		return nil, err
	}
	sf := &segmentFiles{}
	var readers []io.Reader
	for _, s := range segs {
		f, err := journal.OpenSegmentForReading(s.Path)
		if err != nil {
			sf.Close()
			return nil, err
		}
		sf.files = append(sf.files, f)
		readers = append(readers, f)
	}
	sf.Reader = io.MultiReader(readers...)
	return sf, nil
}

// segmentFiles reads its files one after the other.
type segmentFiles struct {
	io.Reader
	files []*os.File
}

func (s *segmentFiles) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// openRead opens the book read-only, the way the outbox's read-only store does: a check must not write
// to what it checks, not even a -wal or -shm beside a closed book.
func openRead(ctx context.Context, path string) (*sql.DB, error) {
	d, err := outbox.OpenReadOnlyDB(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("demo: open %s: %w", path, err)
	}
	return d, nil
}
