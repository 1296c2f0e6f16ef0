// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/textmachine/outbox/internal/flock"
)

// lockFile takes the inbox's exclusive lock on the database file, through a descriptor of its own:
// a flock belongs to that open file description, so a second Inbox in this process is refused as well
// as one in another, and SQLite's own (OFD) locks on the file do not touch it. The link count is read
// on the locked descriptor, so a name added before the lock was taken is seen.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("inbox: open %s for locking: %w", path, err)
	}
	if err := flock.Exclusive(f); err != nil {
		f.Close()
		if errors.Is(err, flock.ErrHeld) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("inbox: lock %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		flock.Release(f)
		return nil, fmt.Errorf("inbox: stat %s: %w", path, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		flock.Release(f)
		return nil, fmt.Errorf("%w: %s has %d names; keep one", ErrHardLinked, path, sys.Nlink)
	}
	return f, nil
}

func unlockFile(f *os.File) error { return flock.Release(f) }
