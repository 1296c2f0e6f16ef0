// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// betweenReadsDo makes fn run once, in check, after it has read the book and before it reads the
// journal.
func betweenReadsDo(t *testing.T, fn func()) {
	t.Helper()
	old := betweenCheckReads
	t.Cleanup(func() { betweenCheckReads = old })
	betweenCheckReads = func() {
		betweenCheckReads = old
		fn()
	}
}

// retireAndProject is an engine on the book at dbPath retiring runID's pending line seq and
// projecting the run into the journal at jPath: the tombstone takes the line's place in both.
func retireAndProject(t *testing.T, dbPath, jPath, runID string, seq int64) {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RetireEvent(ctx, runID, seq, "refused downstream"); err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	relay, err := outbox.NewRelay(s, j, runID, outbox.WithForgetProjected(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCheckLooksALineThatDiffersUpAgainInTheBookBeforeReportingIt: an engine that retires a pending
// line and projects its tombstone between check's read of the book and its read of the journal
// leaves the journal holding other bytes than check read from the book; the book now holds the
// journal's bytes, or no longer stores the line, and that is no finding. A line that still differs
// is reported.
func TestCheckLooksALineThatDiffersUpAgainInTheBookBeforeReportingIt(t *testing.T) {
	t.Run("the book stores the tombstone", func(t *testing.T) {
		dbPath, jPath := checkedBook(t)
		betweenReadsDo(t, func() { retireAndProject(t, dbPath, jPath, "engine-2", 6) })
		if code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jPath); code != exitOK || !strings.HasSuffix(out, "\nOK\n") {
			t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
		}
	})
	t.Run("the next engine start forgets the tombstone", func(t *testing.T) {
		dbPath, jPath := checkedBook(t)
		betweenReadsDo(t, func() {
			retireAndProject(t, dbPath, jPath, "engine-2", 6)
			fileEngineStart(t, dbPath, jPath, "engine-3", 3, 0)
		})
		if code, out, errOut := cli(t, "check", "--db", dbPath, "--journal", jPath); code != exitOK || !strings.HasSuffix(out, "\nOK\n") {
			t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
		}
	})
	t.Run("a line that still differs", func(t *testing.T) {
		dbPath, jPath := checkedBook(t)
		rewriteJournal(t, jPath, func(run string, seq int64, l string) string {
			if run == "engine-2" && seq == 2 {
				return strings.TrimSuffix(l, "}\n") + `,"edited":true}` + "\n"
			}
			return l
		})
		betweenReadsDo(t, func() { retireAndProject(t, dbPath, jPath, "engine-2", 6) })
		code, rep := checkJSON(t, "--db", dbPath, "--journal", jPath)
		want := []checkFinding{{Kind: "differ", Run: "engine-2", FromSeq: 2, ToSeq: 2, Lines: 1, Line: 8,
			Message: "run engine-2: seq 2 differs between the book and the journal (journal line 8)"}}
		if diff := cmp.Diff(want, rep.Findings); code != exitFindings || diff != "" {
			t.Errorf("exit %d, findings (-want +got):\n%s", code, diff)
		}
	})
}
