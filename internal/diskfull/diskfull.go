// SPDX-License-Identifier: Apache-2.0

// Package diskfull names a full file system in the errors of SQLite, for the store and the inbox alike.
//
// The driver's unix VFS (ncruces/go-sqlite3 up to v0.37 at least) turns a write refused with ENOSPC into
// SQLITE_FULL only when os.File.WriteAt returns the bare errno, which it never does (it returns an
// *fs.PathError): a real full disk reaches SQLite as a generic SQLITE_IOERR, and the system error is
// kept in the driver's error only until the VFS's next call clears it, so it is usually gone ("disk
// I/O error"; at open, "invalid _pragma"). So an I/O error is looked at again: when the file system
// holding the database has (nearly) no space or no inode left, the write was refused for lack of
// space, and the error says so.
package diskfull

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ncruces/go-sqlite3"
)

// Margin is the free space below which a file system counts as full: a write SQLite makes is at most a
// page (64 KiB at the most), the WAL index grows in 32 KiB chunks, and a write refused for lack of
// space leaves less than the block it needed. What SQLite gives back after the failure (a deleted
// rollback journal) is small beside it.
const Margin = 64 << 10

// Named returns err, joined with syscall.ENOSPC when it is SQLite's report of a write the file system
// holding path refused for lack of space: SQLITE_FULL, or an I/O error or a failed open while that
// file system has less than Margin available (to the calling user) or no free inode. Any other error,
// and one that already is ENOSPC, is returned as it is. An I/O error of another cause on a file system
// that is full at that moment is named a full disk too: the disk is full either way.
func Named(path string, err error) error {
	switch {
	case err == nil, errors.Is(err, syscall.ENOSPC):
		return err
	case errors.Is(err, sqlite3.FULL):
		return fmt.Errorf("%w: %w", err, syscall.ENOSPC)
	case errors.Is(err, sqlite3.IOERR), errors.Is(err, sqlite3.CANTOPEN):
		if Full(path) {
			return fmt.Errorf("%w: %w", err, syscall.ENOSPC)
		}
	}
	return err
}

// Full reports whether the file system holding path (or, when path does not exist, its directory)
// has less than Margin available to the calling user, or no free inode. It reports false where it
// cannot tell.
func Full(path string) bool {
	free, inodes, ok := space(path)
	if !ok {
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			return false
		}
		if free, inodes, ok = space(filepath.Dir(path)); !ok {
			return false
		}
	}
	return free < Margin || inodes == 0
}
