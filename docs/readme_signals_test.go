// SPDX-License-Identifier: Apache-2.0

package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// systemd and Kubernetes stop a service with SIGTERM: a program that listens for SIGINT alone is
// killed by it, with no flush and no close, which is not the clean stop the README promises.
func TestTheREADMEsAndExamplesProgramsStopCleanlyOnSIGTERM(t *testing.T) {
	files := []string{"README.md"}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range examples {
		rel, _ := filepath.Rel(root, e)
		files = append(files, rel)
	}
	call := regexp.MustCompile(`signal\.(?:NotifyContext|Notify)\([^\n]*`)
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range call.FindAllString(string(b), -1) {
			found++
			if !regexp.MustCompile(`\bsyscall\.SIGTERM\b`).MatchString(c) {
				t.Errorf("%s: %s: SIGTERM is not among the signals it stops on", f, c)
			}
		}
	}
	if found == 0 {
		t.Fatal("no program that stops on a signal: the test reads the wrong files")
	}
}
