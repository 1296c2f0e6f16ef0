// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin || freebsd

package diskfull

import (
	"math"
	"syscall"
)

// space returns the bytes available to the calling user on the file system holding path, and its
// free inodes (math.MaxUint64 when it does not count them).
func space(path string) (free, inodes uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, false
	}
	inodes = math.MaxUint64
	if st.Files > 0 {
		inodes = uint64(st.Ffree)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), inodes, true
}
