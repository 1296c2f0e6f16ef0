// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package litedb

import "os"

// openProbe refuses anything but a regular file before it opens path.
func openProbe(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st)
	}
	return os.Open(path)
}

// attachShm takes every -shm for a live one where the locks SQLite takes on it are not known: the
// reader is then SQLite's own.
func attachShm(string) (*os.File, bool, error) { return nil, true, nil }
