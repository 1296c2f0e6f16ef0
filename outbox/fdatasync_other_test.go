// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package outbox_test

import "os"

// fdatasync has no system call of its own here: fsync is the nearest.
func fdatasync(f *os.File) error { return f.Sync() }
