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

func TestHelpForEveryCommandExitsZero(t *testing.T) {
	for name := range commands {
		if code, out, _ := cli(t, name, "--help"); code != exitOK || !strings.Contains(out, "usage: outbox "+name) {
			t.Errorf("%s --help: exit %d, %q", name, code, out)
		}
	}
	if code, out, _ := cli(t, "help"); code != exitOK || !strings.Contains(out, "verify") {
		t.Errorf("help: %d %q", code, out)
	}
	_, help, _ := cli(t, "help")
	for _, c := range []string{engineCommand, platformCommand} {
		if strings.Contains(help, c) {
			t.Errorf("help lists the hidden command %s", c)
		}
	}
}

func TestUnknownCommandsAndFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"stats", "--nope"},
		{"verify"},
		{"verify", "a", "b"},
		{"pending", "--db", "x"},
		{"migrate", "sideways", "--db", "x"},
		{"demo", "--units", "1"},
		{"pending", "--db", "x", "--run", "r", "--limit", "0"},
		{"stats"},
		{"relay", "--db", "x"},
		{"migrate", "--db", "x"},
		{"pending", "--limit", "many"},
	} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if errOut == "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line", args, errOut)
		}
	}
}
