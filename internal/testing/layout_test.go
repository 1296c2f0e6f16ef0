// SPDX-License-Identifier: Apache-2.0

package testing_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestNoLibraryPackageImportsTheRigsOrTheDemo: what a user's program links is the library and the
// floors under it, never the test rigs (internal/testing/...) or the demo's simulated engine.
func TestNoLibraryPackageImportsTheRigsOrTheDemo(t *testing.T) {
	t.Parallel()
	const module = "github.com/textmachine/outbox"
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Deps,Standard",
		module+"/outbox", module+"/inbox", module+"/journal", module+"/migrations", module+"/db")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		seen++
		if strings.HasPrefix(p.ImportPath, module+"/internal/testing") || strings.HasPrefix(p.ImportPath, module+"/internal/demo") {
			t.Errorf("a library package depends on %s", p.ImportPath)
		}
	}
	if seen < 5 {
		t.Fatalf("go list named %d packages of the module: the check read nothing", seen)
	}
}
