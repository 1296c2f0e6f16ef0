// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestPendingWithoutARunListsEveryRunWithPendingLines(t *testing.T) {
	dbPath, _ := book(t) // "old": everything projected; "dead": 3 lines pending
	code, out, errOut := cli(t, "pending", "--db", dbPath)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != exitOK || errOut != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "run\tpending\t") ||
		!strings.HasPrefix(lines[1], "dead\t3\t1\t3\t") {
		t.Fatalf("pending without --run: exit %d, %q %q", code, out, errOut)
	}
}

func TestPendingWithoutARunPagesThroughManyRuns(t *testing.T) {
	// More runs than one page of the book's listing, some with pending lines and some without.
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 1200
	for i := range runs {
		run := fmt.Sprintf("run-%04d", i)
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	code, out, errOut := cli(t, "pending", "--db", dbPath, "--limit", "100000")
	if n := strings.Count(out, "\n"); code != exitOK || errOut != "" || n != runs+1 {
		t.Fatalf("pending: exit %d, %d lines, %q", code, n, errOut)
	}
	// --limit cuts the list, says so on standard error, and --after-run goes on from there.
	code, out, errOut = cli(t, "pending", "--db", dbPath, "--limit", "700")
	if code != exitOK || strings.Count(out, "\n") != 701 || !strings.Contains(errOut, "--after-run run-0699") {
		t.Fatalf("pending --limit 700: exit %d, %d lines, %q", code, strings.Count(out, "\n"), errOut)
	}
	code, out, errOut = cli(t, "pending", "--db", dbPath, "--limit", "700", "--after-run", "run-0699")
	if code != exitOK || errOut != "" || strings.Count(out, "\n") != 501 || !strings.Contains(out, "\nrun-0700\t") {
		t.Fatalf("pending --after-run: exit %d, %d lines, %q", code, strings.Count(out, "\n"), errOut)
	}
}

func TestPendingRefusesLineFlagsWithoutARun(t *testing.T) {
	dbPath, _ := book(t)
	for _, args := range [][]string{
		{"pending", "--db", dbPath, "--all"},
		{"pending", "--db", dbPath, "--raw"},
		{"pending", "--db", dbPath, "--after", "3"},
		{"pending", "--db", dbPath, "--run", "dead", "--after-run", "a"},
	} {
		if code, out, errOut := cli(t, args...); code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
}

func TestPendingPrintsLinesExactlyAsStored(t *testing.T) {
	dbPath, _ := book(t)
	s, _ := outbox.OpenReadOnly(context.Background(), dbPath)
	lines, _ := s.PendingEvents(context.Background(), "dead", 0, 10)
	s.Close()
	var want bytes.Buffer
	for _, l := range lines[1:] {
		want.Write(l.Line)
		want.WriteByte('\n')
	}
	code, out, errOut := cli(t, "pending", "--db", dbPath, "--run", "dead", "--after", "1", "--limit", "5")
	if code != exitOK || out != want.String() {
		t.Errorf("pending: %d %q, want %q (%s)", code, out, want.String(), errOut)
	}
	if code, out, _ := cli(t, "pending", "--db", dbPath, "--run", "dead", "--limit", "1"); code != exitOK || strings.Count(out, "\n") != 1 {
		t.Errorf("--limit 1: %q", out)
	}
}

func TestPendingShowsTheLinesNotYetProjectedByDefaultAndEveryStoredLineWithAll(t *testing.T) {
	dbPath, _ := book(t) // run "old": 2 lines, projected; run "dead": 3 lines, none projected
	count := func(args ...string) int {
		t.Helper()
		code, out, errOut := runOutbox(t, append([]string{"pending", "--db", dbPath}, args...)...)
		if code != exitOK {
			t.Fatalf("%v: %d %s", args, code, errOut)
		}
		return strings.Count(out, "\n")
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--run", "old"}, 0},
		{[]string{"--run", "old", "--all"}, 2},
		{[]string{"--run", "old", "--all", "--after", "1"}, 1},
		{[]string{"--run", "dead"}, 3},
		{[]string{"--run", "dead", "--after", "2"}, 1},
		{[]string{"--run", "dead", "--limit", "2"}, 2},
	} {
		if got := count(tc.args...); got != tc.want {
			t.Errorf("pending %v: %d lines, want %d", tc.args, got, tc.want)
		}
	}
}

func TestPendingOfAnUnknownRunSaysSo(t *testing.T) {
	dbPath, _ := book(t)
	code, out, errOut := cli(t, "pending", "--db", dbPath, "--run", "nobody")
	if code != exitFindings || out != "" || !strings.Contains(errOut, "outbox pending: run nobody is not in ") {
		t.Errorf("pending of an unknown run: %d %q %q", code, out, errOut)
	}
	// A run whose lines were all projected is known, with nothing pending.
	if code, out, errOut := cli(t, "pending", "--db", dbPath, "--run", "old"); code != exitOK || out != "" || errOut != "" {
		t.Errorf("pending of a projected run: %d %q %q", code, out, errOut)
	}
}

func TestPendingSaysWhenTheLimitCutTheList(t *testing.T) {
	dbPath, _ := book(t) // "dead": 3 lines pending
	code, out, errOut := cli(t, "pending", "--db", dbPath, "--run", "dead", "--limit", "2")
	if code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "--limit 2 cut the list after seq 2; more lines follow (--after 2 shows them)") {
		t.Errorf("pending --limit 2 of 3: %d %q %q", code, out, errOut)
	}
	for _, limit := range []string{"3", "4"} {
		if code, out, errOut := cli(t, "pending", "--db", dbPath, "--run", "dead", "--limit", limit); code != exitOK || strings.Count(out, "\n") != 3 || errOut != "" {
			t.Errorf("pending --limit %s of 3: %d %q %q", limit, code, out, errOut)
		}
	}
}
