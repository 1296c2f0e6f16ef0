// SPDX-License-Identifier: Apache-2.0

//go:build unix

package journal

import (
	"errors"
	"os"

	"github.com/textmachine/outbox/internal/flock"
)

// lock takes an exclusive flock: it belongs to this open file description, so a second OpenFile in
// the same process is refused as well as one in another process. It returns errHeld when another
// holder has it.
func lock(f *os.File) error {
	if err := flock.Exclusive(f); err != nil {
		if errors.Is(err, flock.ErrHeld) {
			return errHeld
		}
		return err
	}
	return nil
}

// unlock gives up the lock and closes f. Closing alone could leave the lock held for a moment by a
// child being forked; see flock.Release.
func unlock(f *os.File) error { return flock.Release(f) }
