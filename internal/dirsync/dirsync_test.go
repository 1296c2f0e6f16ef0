// SPDX-License-Identifier: Apache-2.0

package dirsync_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/dirsync"
)

func TestSyncOfADirectoryWithANewFileSucceeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dirsync.Sync(dir); err != nil {
		t.Fatalf("Sync(%s): %v", dir, err)
	}
}

func TestSyncOfAMissingDirectoryNamesItAndIsErrNotExist(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "missing")
	err := dirsync.Sync(dir)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Sync(%s) = %v, want os.ErrNotExist naming the directory", dir, err)
	}
}
