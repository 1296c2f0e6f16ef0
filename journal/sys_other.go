// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package journal

import "os"

// datasync is a full fsync where fdatasync is not available (on darwin, os.File.Sync issues
// F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }
