// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

func TestHelpOfANestedCommandPrintsThatCommandsHelp(t *testing.T) {
	for _, args := range [][]string{{"journal", "accept-missing"}, {"journal", "adopt"}, {"journal", "trim"}, {"stream", "trim"}, {"inbox", "stats"}} {
		code, out, errOut := cli(t, append([]string{"help"}, args...)...)
		_, want, _ := cli(t, append(args, "--help")...)
		if code != exitOK || out != want || errOut != "" {
			t.Errorf("help %v: exit %d, stdout %q, stderr %q; want %v --help's %q", args, code, out, errOut, args, want)
		}
		if !strings.HasPrefix(out, "usage: outbox "+strings.Join(args, " ")+" ") {
			t.Errorf("%v --help does not begin with its own usage: %q", args, out)
		}
	}
}

func TestJournalAdoptHelpIsAdoptsOwn(t *testing.T) {
	code, out, errOut := cli(t, "journal", "adopt", "--help")
	if code != exitOK || errOut != "" || !strings.HasPrefix(out, "usage: outbox journal adopt FILE DIR\n") || strings.Contains(out, "trim DIR") {
		t.Errorf("journal adopt --help: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestHelpListsJournalAcceptMissing(t *testing.T) {
	_, list, _ := cli(t, "help")
	_, group, _ := cli(t, "journal", "--help")
	for name, out := range map[string]string{"help": list, "journal --help": group} {
		if !strings.Contains(out, "accept-missing") {
			t.Errorf("%s does not name accept-missing: %q", name, out)
		}
	}
	if !strings.Contains(strings.SplitN(group, "\n", 2)[0], "accept-missing DIR") {
		t.Errorf("journal --help's usage line lacks accept-missing: %q", group)
	}
}

func TestHelpAlignsEveryCommandsSummary(t *testing.T) {
	_, out, _ := cli(t, "help")
	col := -1
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "  ") {
			continue
		}
		name := strings.Fields(line)[0]
		at := strings.Index(line[2+len(name):], strings.Fields(line)[1]) + 2 + len(name)
		if col == -1 {
			col = at
		}
		if at != col {
			t.Errorf("%q's summary begins at column %d, the first one's at %d", name, at, col)
		}
	}
}

func TestStreamHelpShowsTheGroupsSubcommands(t *testing.T) {
	code, out, errOut := cli(t, "stream", "--help")
	if code != exitOK || errOut != "" {
		t.Fatalf("stream --help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"outbox stream create", "outbox stream trim", "outbox stream readers", "create (the flags below are its)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stream --help lacks %q", want)
		}
	}
}
