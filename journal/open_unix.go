// SPDX-License-Identifier: Apache-2.0

//go:build unix

package journal

import (
	"os"
	"syscall"
)

// openNonblock keeps open(2) from waiting for a FIFO's other end, should the path name one.
const openNonblock = syscall.O_NONBLOCK

// setBlocking clears O_NONBLOCK on a regular file once it is known to be one.
func setBlocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}

// fileID returns the file's inode number: what tells the file a checkpoint was written for from a
// copy of it. 0 when the system gives none.
func fileID(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Ino)
	}
	return 0
}

// linkCount returns how many names the file has, or 0 when the system does not say.
func linkCount(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Nlink)
	}
	return 0
}
