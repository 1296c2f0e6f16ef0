// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"strings"
	"testing"
)

// A report that could not be written is an I/O error (exit 2, said on standard error), as stats
// says it: `outbox verify j > report` on a full disk must not exit 0 with nothing in report.
func TestVerifyAndCheckExitTwoWhenTheirReportCannotBeWritten(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	full.Close()
	dbPath, jPath := checkedBook(t)
	for _, args := range [][]string{
		{"verify", jPath},
		{"verify", "--json", jPath},
		{"check", "--db", dbPath, "--journal", jPath},
		{"check", "--json", "--db", dbPath, "--journal", jPath},
	} {
		cmd := outboxCmd(t, args...)
		out, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var errOut strings.Builder
		cmd.Stdout, cmd.Stderr = out, &errOut
		cmd.Run()
		out.Close()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.HasPrefix(errOut.String(), "outbox "+args[0]+": ") {
			t.Errorf("%q > /dev/full: exit %d, stderr %q; want 2 naming the write error", args, code, errOut.String())
		}
	}
}
