// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package journal

import "os"

// openNonblock: no FIFO to wait for here.
const openNonblock = 0

func setBlocking(*os.File) error { return nil }

// fileID is 0 where the system gives no inode number: no checkpoint is trusted there.
func fileID(os.FileInfo) uint64 { return 0 }

// linkCount is 0 where the system does not say how many names a file has.
func linkCount(os.FileInfo) uint64 { return 0 }
