// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

// "outbox help stats" is "outbox stats --help": the command's own help, on standard output, exit 0.
func TestHelpOfACommandPrintsThatCommandsHelp(t *testing.T) {
	code, out, errOut := cli(t, "help", "stats")
	_, want, _ := cli(t, "stats", "--help")
	if code != exitOK || out != want || errOut != "" {
		t.Errorf("help stats: exit %d, stdout %q, stderr %q; want stats --help's %q", code, out, errOut, want)
	}
	if code, _, errOut := cli(t, "help", "nonsense"); code != exitUsage || !strings.Contains(errOut, "unknown command") {
		t.Errorf("help nonsense: exit %d, %q", code, errOut)
	}
}

// A redraw reads the whole book: --watch has a floor, so that a typo like 1ns does not keep a core
// and the book's read connection busy beside the engine.
func TestStatsWatchRefusesAnIntervalBelowItsFloor(t *testing.T) {
	code, out, errOut := cli(t, "stats", "--db", "book.db", "--watch", "1ns")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "--watch must be at least") {
		t.Errorf("stats --watch 1ns: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
