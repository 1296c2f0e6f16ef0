// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

func TestVerifyExitStatusNamesTheProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	l := func(run string, seq int, extra string) string {
		return fmt.Sprintf(`{"engine_run_id":%q,"seq":%d%s}`+"\n", run, seq, extra)
	}
	clean := write("clean", l("a", 1, "")+l("a", 2, "")+l("a", 2, ""))
	code, out, _ := cli(t, "verify", clean)
	if code != exitOK || !strings.Contains(out, "2 unique lines, 3 in all, 1 duplicate skipped") {
		t.Errorf("clean: %d %q", code, out)
	}
	for name, tc := range map[string]struct {
		content string
		kind    string
		names   []string
	}{
		"gap":       {l("a", 1, "") + l("a", 3, ""), "gap", []string{"line 2", `"a"`, "expected seq 2", "found 3"}},
		"conflict":  {l("a", 1, `,"x":1`) + l("a", 1, `,"x":2`), "conflict", []string{"line 2", `"a"`, "seq 1"}},
		"malformed": {l("a", 1, "") + "{oops\n", "malformed", []string{"line 2"}},
	} {
		p := write(name, tc.content)
		code, _, errOut := cli(t, "verify", p)
		if code != exitFindings {
			t.Errorf("%s: exit %d, want 1", name, code)
		}
		for _, n := range tc.names {
			if !strings.Contains(errOut, n) {
				t.Errorf("%s: %q does not name %s", name, errOut, n)
			}
		}
		code, out, _ := cli(t, "verify", "--json", p)
		var rep verifyReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitFindings || rep.OK || rep.Finding == nil || rep.Finding.Kind != tc.kind || rep.Finding.Line != 2 {
			t.Errorf("%s --json: %d %v %+v", name, code, err, rep.Finding)
		}
	}
	if code, _, _ := cli(t, "verify", filepath.Join(dir, "missing")); code != exitUsage {
		t.Errorf("missing file: exit %d, want 2", code)
	}
}

func TestVerifyDashReadsStandardInput(t *testing.T) {
	cmd := outboxCmd(t, "verify", "--json", "-")
	cmd.Stdin = strings.NewReader(`{"engine_run_id":"a","seq":1}` + "\n" + `{"engine_run_id":"a","seq":2}` + "\n")
	code, out, errOut := runCmd(t, cmd)
	var rep verifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || rep.Lines != 2 || rep.File != "-" {
		t.Errorf("verify - : %d %v %+v %q", code, err, rep, errOut)
	}
	cmd = outboxCmd(t, "verify", "-")
	cmd.Stdin = strings.NewReader(`{"engine_run_id":"a","seq":2}` + "\n")
	if code, _, errOut := runCmd(t, cmd); code != exitFindings || !strings.Contains(errOut, "expected seq 1, found 2") {
		t.Errorf("verify - of a gap: %d %q", code, errOut)
	}
}
