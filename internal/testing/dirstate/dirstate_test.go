// SPDX-License-Identifier: Apache-2.0

package dirstate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/dirstate"
)

func TestASnapshotChangesWithAnyFileCreatedChangedOrRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "one")
	before := dirstate.Snapshot(t, dir)
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Fatalf("two snapshots of an untouched directory differ:\n%s", diff)
	}
	for name, change := range map[string]func(){
		"created": func() { write("b", "") },
		"changed": func() { write("a", "two") },
		"removed": func() { os.Remove(filepath.Join(dir, "a")) },
	} {
		change()
		if cmp.Equal(before, dirstate.Snapshot(t, dir)) {
			t.Errorf("a file %s: the snapshot is the same", name)
		}
		os.Remove(filepath.Join(dir, "b"))
		write("a", "one")
	}
}
