// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"os"
	"syscall"
)

// datasync flushes the file's data and the metadata needed to read it back (its length), not its
// timestamps: one journal write costs one device flush.
func datasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
