// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"os"
	"syscall"
)

// fdatasync is what the store's own WAL sync and journal.File do on Linux.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
