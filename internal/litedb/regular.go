// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"fmt"
	"os"

	"github.com/ncruces/go-sqlite3/vfs"
)

// RegularFile stats path and refuses anything but a regular file, before anything opens it.
func RegularFile(path string) (os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st)
	}
	return st, nil
}

// sameFile fails unless f, as the driver opened it, is the file that probe has open.
func sameFile(f vfs.File, probe *os.File) error {
	want, err := probe.Stat()
	if err != nil {
		return err
	}
	return isFile(f, want, probe.Name())
}

// isFile fails unless f is the file want describes. A file of a VFS that does not say what it has
// open passes.
func isFile(f vfs.File, want os.FileInfo, path string) error {
	for f != nil {
		if s, ok := f.(interface{ Stat() (os.FileInfo, error) }); ok {
			got, err := s.Stat()
			if err != nil {
				return err
			}
			if !os.SameFile(got, want) {
				return fmt.Errorf("%s was replaced while it was being opened", path)
			}
			return nil
		}
		u, ok := f.(vfs.FileUnwrap)
		if !ok {
			return nil
		}
		f = u.Unwrap()
	}
	return nil
}

// notRegular is the error for a path that is not a regular file: SQLite would block in open(2) on a
// named pipe, and read a device.
func notRegular(path string, st os.FileInfo) error {
	kind := st.Mode().Type().String()
	switch t := st.Mode().Type(); {
	case t&os.ModeNamedPipe != 0:
		kind = "a named pipe"
	case t&os.ModeDir != 0:
		kind = "a directory"
	case t&os.ModeSocket != 0:
		kind = "a socket"
	case t&os.ModeDevice != 0:
		kind = "a device"
	case t&os.ModeSymlink != 0:
		kind = "a symbolic link"
	}
	return fmt.Errorf("%s is %s, not a regular file", path, kind)
}
