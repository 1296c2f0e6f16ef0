// SPDX-License-Identifier: Apache-2.0

package smallfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

func mount(dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	return syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", Size))
}

func unmount(dir string) error { return syscall.Unmount(dir, 0) }

// freeBytes is the space the file system of dir has free for an unprivileged writer.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
