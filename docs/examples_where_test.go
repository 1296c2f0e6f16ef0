// SPDX-License-Identifier: Apache-2.0

package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// Plain `go doc` (and `go doc -all`) prints no Example function: a reader sent there for one finds
// nothing, so the docs name where the examples are instead.
func TestTheDocsDoNotSendReadersToPlainGoDocForExamples(t *testing.T) {
	claim := regexp.MustCompile("`go doc` (?:has|shows|prints|gives)[^.]*[Ee]xample")
	for _, f := range []string{"README.md", filepath.Join("docs", "API.md")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if m := claim.Find(b); m != nil {
			t.Errorf("%s says %q: go doc prints no examples", f, m)
		}
		if !regexp.MustCompile("_test.go").Match(b) {
			t.Errorf("%s does not say where the examples are (their _test.go files)", f)
		}
	}
}
