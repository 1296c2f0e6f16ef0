// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestDBAndJournalAreFilePathsTakenLiterally(t *testing.T) {
	for _, name := range []string{"a%41.db", "book?.db", "x.db?mode=memory"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			jName := "j" + strings.TrimSuffix(name, ".db") + ".jsonl"
			in := func(args ...string) {
				t.Helper()
				cmd := outboxCmd(t, args...)
				cmd.Dir = dir
				if code, out, errOut := runCmd(t, cmd); code != exitOK {
					t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
				}
			}
			in("migrate", "up", "--db", name)
			s, err := outbox.Open(context.Background(), filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnqueueEvent(context.Background(), "r", journal.Handshake("r", nil)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			in("migrate", "status", "--db", name)
			in("migrate", "version", "--db", name)
			in("stats", "--db", name)
			in("pending", "--db", name, "--run", "r")
			in("relay", "--db", name, "--journal", jName)
			in("verify", jName)
			in("migrate", "down", "--db", name, "--force")
			var names []string
			for n := range dirstate.Snapshot(t, dir) {
				names = append(names, n)
			}
			if diff := cmp.Diff([]string{name, jName}, names, sortStrings); diff != "" {
				t.Errorf("files in the directory (-want +got):\n%s", diff)
			}
		})
	}
}

var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })
