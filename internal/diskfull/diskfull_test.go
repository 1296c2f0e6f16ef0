// SPDX-License-Identifier: Apache-2.0

package diskfull_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/internal/diskfull"
	"github.com/textmachine/outbox/internal/testing/smallfs"
)

// TestAnIOErrorIsAFullDiskOnlyWhereTheFileSystemIsFull: SQLite's generic I/O error (how the driver
// reports a real ENOSPC) is named a full disk on a full file system and nowhere else, SQLITE_FULL
// always, and no other error ever.
func TestAnIOErrorIsAFullDiskOnlyWhereTheFileSystemIsFull(t *testing.T) {
	t.Parallel()
	roomy := filepath.Join(t.TempDir(), "book.db")
	ioErr := fmt.Errorf("commit: %w", sqlite3.IOERR)
	if err := diskfull.Named(roomy, ioErr); errors.Is(err, syscall.ENOSPC) {
		t.Errorf("an I/O error with space left: %v, named a full disk", err)
	}
	if err := diskfull.Named(roomy, sqlite3.FULL); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, sqlite3.FULL) {
		t.Errorf("SQLITE_FULL: %v, want ENOSPC with SQLite's error kept", err)
	}
	if err := diskfull.Named(roomy, nil); err != nil {
		t.Errorf("nil: %v", err)
	}

	dir := smallfs.Mount(t)
	free := smallfs.Fill(t, dir)
	defer free()
	// The database file need not exist yet: a first open fails before it has a byte.
	full := filepath.Join(dir, "book.db")
	err := diskfull.Named(full, ioErr)
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, sqlite3.IOERR) {
		t.Errorf("an I/O error on a full file system: %v, want ENOSPC with SQLite's error kept", err)
	}
	for _, other := range []error{errors.New("a handler's own error"), sqlite3.CONSTRAINT, sqlite3.BUSY} {
		if err := diskfull.Named(full, other); err != other {
			t.Errorf("%v on a full file system became %v", other, err)
		}
	}
}
