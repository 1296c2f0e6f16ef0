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
