// SPDX-License-Identifier: Apache-2.0

package main

import (
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
