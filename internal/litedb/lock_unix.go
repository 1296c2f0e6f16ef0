// SPDX-License-Identifier: Apache-2.0

//go:build unix

package litedb

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/textmachine/outbox/internal/flock"
)

// lockFile takes an exclusive flock on path through a descriptor of its own.
//
// flock, not fcntl: a POSIX record lock belongs to the process, so a second open in the same process
// would be granted it, and SQLite closing any of its own descriptors on the file would silently drop
// it. A flock belongs to this open file description alone and lives until the descriptor is closed.
// On Linux flock and the OFD locks SQLite itself uses do not interact.
func lockFile(path string, n Names) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%sopen %s for locking: %w", n.Prefix, path, err)
	}
	if err := flock.Exclusive(f); err != nil {
		f.Close()
		if errors.Is(err, flock.ErrHeld) {
			return nil, fmt.Errorf("%w: %s", n.Locked, path)
		}
		return nil, fmt.Errorf("%slock %s: %w", n.Prefix, path, err)
	}
	// Checked on the locked descriptor, so a name added before the lock was taken is seen. A name
	// added later is the operator's doing; the lock keeps a second writer out either way.
	st, err := f.Stat()
	if err != nil {
		flock.Release(f)
		return nil, fmt.Errorf("%sstat %s: %w", n.Prefix, path, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		flock.Release(f)
		return nil, fmt.Errorf("%w: %s has %d names; SQLite gives each name its own -wal, so keep one", n.HardLinked, path, sys.Nlink)
	}
	return f, nil
}

// Unlock gives up the lock and closes f. Closing alone could leave the lock held for a moment by a
// child being forked; see flock.Release.
func Unlock(f *os.File) error { return flock.Release(f) }
