// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// dirEngineStart is engineStart into the journal directory jDir, its segments sealed at 1 KiB.
func dirEngineStart(t *testing.T, dbPath, jDir, run string, projected, unprojected int) {
	t.Helper()
	j, err := journal.Open(jDir, journal.WithSegmentSize(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	engineStart(t, dbPath, j, run, projected, unprojected)
}

// checkedDirBook is checkedBook with a journal directory of at least three segments.
func checkedDirBook(t *testing.T) (dbPath, jDir string) {
	t.Helper()
	dir := t.TempDir()
	dbPath, jDir = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	dirEngineStart(t, dbPath, jDir, "engine-1", 5, 1)
	dirEngineStart(t, dbPath, jDir, "engine-2", 5, 2)
	segs, err := journal.SegmentsOf(jDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	return dbPath, jDir
}

// catSegments writes the directory's segments, concatenated, to a file and returns its path.
func catSegments(t *testing.T, jDir string) string {
	t.Helper()
	segs, err := journal.SegmentsOf(jDir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, s := range segs {
		b, err := os.ReadFile(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(p, all, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVerifyAndCheckReadAJournalDirectoryAsTheFileOfItsSegmentsConcatenated(t *testing.T) {
	dbPath, jDir := checkedDirBook(t)
	file := catSegments(t, jDir)
	code, fromDir, errOut := cli(t, "verify", jDir)
	_, fromFile, _ := cli(t, "verify", file)
	if code != exitOK || errOut != "" || fromDir != fromFile {
		t.Errorf("verify DIR: exit %d, %q\n%s\nverify of the concatenated file:\n%s", code, errOut, fromDir, fromFile)
	}
	code, fromDir, errOut = cli(t, "check", "--db", dbPath, "--journal", jDir)
	_, fromFile, _ = cli(t, "check", "--db", dbPath, "--journal", file)
	if code != exitOK || errOut != "" || strings.ReplaceAll(fromFile, quote(file), quote(jDir)) != fromDir {
		t.Errorf("check --journal DIR: exit %d, %q\n%s\nagainst the concatenated file:\n%s", code, errOut, fromDir, fromFile)
	}
}

func TestVerifyNamesTheSegmentAndLineOfAFindingInAJournalDirectory(t *testing.T) {
	_, jDir := checkedDirBook(t)
	segs, _ := journal.SegmentsOf(jDir)
	mid := segs[1]
	b, err := os.ReadFile(mid.Path)
	if err != nil {
		t.Fatal(err)
	}
	// The segment's first line loses its key: a malformed line of the same length.
	b = []byte(strings.Replace(string(b), `"seq":`, `"sex":`, 1))
	if err := os.WriteFile(mid.Path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := cli(t, "verify", "--json", jDir)
	var rep verifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(mid.Path)
	if code != exitFindings || rep.Finding == nil || rep.Finding.Segment != name || rep.Finding.SegmentLine != 1 ||
		!strings.Contains(rep.Finding.Message, name+" line 1") {
		t.Errorf("verify --json DIR: exit %d, finding %+v; want segment %s line 1", code, rep.Finding, name)
	}
}

func TestCheckFindsALineTheBookLacksInTheThirdSegment(t *testing.T) {
	dbPath, jDir := checkedDirBook(t)
	segs, _ := journal.SegmentsOf(jDir)
	for len(segs) > 3 {
		// Keep exactly three: what lies beyond the third goes, as the book's lines up to there
		// stay in the journal (engine-2's later lines, which the book records projected, are
		// then the journal's lack, a finding of its own).
		os.Remove(segs[len(segs)-1].Path)
		segs = segs[:len(segs)-1]
	}
	third := segs[2]
	f, err := os.OpenFile(third.Path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"engine_run_id":"stranger","seq":1,"type":"x"}`+"\n")
	f.Close()
	code, rep := checkJSON(t, "--db", dbPath, "--journal", jDir)
	if code != exitFindings {
		t.Fatalf("exit %d, %+v", code, rep)
	}
	var found *checkFinding
	for i, f := range rep.Findings {
		if f.Kind == "unknown_run" && f.Run == "stranger" {
			found = &rep.Findings[i]
		}
	}
	if found == nil || !strings.HasPrefix(found.Segment, "segment "+filepath.Base(third.Path)+" line ") ||
		!strings.Contains(found.Message, filepath.Base(third.Path)) {
		t.Errorf("findings %+v: want run stranger unknown, found in %s", rep.Findings, filepath.Base(third.Path))
	}
}

// TestCheckHoldsPagesOfStoredRowsForAFewRunsOnly: a book of many runs with stored rows, and a run of
// more rows than a page, leave check holding at most maxPages pages of at most bookPage rows,
// having read the long run a page at a time.
func TestCheckHoldsPagesOfStoredRowsForAFewRunsOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jDir := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(jDir, journal.WithSegmentSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	const runs, long = maxPages + 36, 3*bookPage + 10
	for r := range runs {
		run := fmt.Sprintf("run-%03d", r)
		n := 2
		if r == 0 {
			n = long
		}
		builds := make([]outbox.EventBuilder, n)
		for i := range builds {
			builds[i] = journal.Builder(run, "tick", i)
		}
		if _, err := s.EnqueueEvents(ctx, run, builds); err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(s, j, run, outbox.WithForgetProjected(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	s.Close()

	var most, rows int
	var reads int64
	checked = func(c *checker) {
		most, reads = len(c.pages), c.pageReads
		for _, p := range c.pages {
			rows = max(rows, len(p.rows))
		}
	}
	t.Cleanup(func() { checked = nil })
	code, rep := checkJSON(t, "--db", dbPath, "--journal", jDir)
	if code != exitOK || rep.Compared != runs*2-2+long {
		t.Fatalf("exit %d, %+v", code, rep)
	}
	if most > maxPages || rows > bookPage {
		t.Errorf("check held %d pages, the largest of %d rows; want at most %d of %d", most, rows, maxPages, bookPage)
	}
	if want := int64(runs - 1 + (long+bookPage-1)/bookPage); reads != want {
		t.Errorf("%d reads of stored rows, want %d: one a run, and the long run a page at a time", reads, want)
	}
}

func TestVerifyOfASegmentAfterTheFirstLetsItsRunsBeginMidway(t *testing.T) {
	_, jDir := checkedDirBook(t)
	segs, _ := journal.SegmentsOf(jDir)
	code, out, errOut := cli(t, "verify", "--json", segs[1].Path)
	var rep verifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	begun := false
	for _, r := range rep.Runs {
		begun = begun || r.First > 1
	}
	if code != exitOK || !begun {
		t.Errorf("verify of the second segment: exit %d, %q, runs %+v; want OK with a run begun mid-way", code, errOut, rep.Runs)
	}
}
