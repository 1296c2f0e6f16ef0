// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox

import (
	"errors"
	"os"
	"syscall"
)

// lockShared takes a shared flock on a segment the source has open, without waiting: the journal's
// retention takes an exclusive one before it removes a segment, and keeps every segment it cannot
// lock. errHeldExclusive: retention holds it, and is removing it.
func lockShared(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errHeldExclusive
		default:
			return err
		}
	}
}

// unlockShared gives the lock up before the file is closed: a child being forked holds a copy of
// the descriptor until its exec, which would keep the lock alive after the close.
func unlockShared(f *os.File) {
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
