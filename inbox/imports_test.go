// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTheInboxImportsNothingOfTheEnginesPackage: a consumer's program links the inbox, not the
// engine's store, group committer and relay; what both ends share is the floor under them
// (internal/litedb).
func TestTheInboxImportsNothingOfTheEnginesPackage(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "github.com/textmachine/outbox/outbox" {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
