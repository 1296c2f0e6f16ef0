// SPDX-License-Identifier: Apache-2.0

//go:build unix

package journal

import (
	"errors"
	"os"
	"syscall"
)

// holdForReading takes a shared flock on a segment a reader has open, as every reader of a journal
// directory does for as long as it reads one: retention deletes no segment whose exclusive lock it
// cannot take. It waits while retention holds the segment for a moment to delete it.
func holdForReading(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
