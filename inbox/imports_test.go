// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"errors"
	"go/parser"
	"go/token"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTheInboxImportsNothingOfTheEnginesPackage: the inbox's own code takes nothing of the engine's
// store for its plumbing; what both ends share is the floor under them (internal/litedb). The journal
// package, which the inbox reads through, still names the outbox's public line and sink types, so a
// consumer's program links the outbox package through it.
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

// engineMachinery matches, in what follows "github.com/textmachine/outbox/outbox." in a symbol's
// name, the engine's store and relay: their types and methods (closures included), the group
// committer and its writer, the pending reader, the constructors, and anything of the enqueue path.
var engineMachinery = regexp.MustCompile(`^\(\*?(Store|Relay|committer|groupRun|txWriter|pendingReader)\)\.` +
	`|^(Store|Relay|committer|groupRun|txWriter|pendingReader|Open|OpenReadOnly|NewRelay|Migrate)([.\[]|$)` +
	`|(?i)enqueue`)

// TestAConsumerOnlyProgramLinksNoneOfTheEnginesRelayOrStore: a platform that only reads (an inbox
// applying a journal directory and a journal file, the journal's reader registry, retention and
// verifier) links the outbox package through the journal's public types, but none of the engine's
// machinery: not the store, not the relay, not the group committer, not the enqueue path, and
// nothing of the book's generated SQL. Were one of them linked, every consumer would carry the
// engine's code and change with it. The program is built as a user builds it, and its symbol table
// read; today the outbox package gives it a few error variables and its init.
func TestAConsumerOnlyProgramLinksNoneOfTheEnginesRelayOrStore(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "consumeronly")
	out, err := osexec.Command("go", "build", "-o", bin, "./testdata/consumeronly").CombinedOutput()
	if errors.Is(err, osexec.ErrNotFound) {
		t.Skip("no go command on PATH")
	} else if err != nil {
		t.Fatalf("go build ./testdata/consumeronly: %v\n%s", err, out)
	}
	syms, err := osexec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	const engine, book = "github.com/textmachine/outbox/outbox.", "github.com/textmachine/outbox/db."
	var linked []string
	for line := range strings.Lines(string(syms)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		name := fields[len(fields)-1]
		if strings.Contains(name, book) {
			t.Errorf("the book's generated SQL is linked: %s", name)
		}
		if i := strings.Index(name, engine); i >= 0 {
			linked = append(linked, name)
			if engineMachinery.MatchString(name[i+len(engine):]) {
				t.Errorf("the engine's machinery is linked: %s", name)
			}
		}
	}
	if t.Failed() {
		t.Logf("every symbol of the outbox package linked:\n%s", strings.Join(linked, "\n"))
	}
}
