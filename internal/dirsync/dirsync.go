// SPDX-License-Identifier: Apache-2.0

// Package dirsync makes a directory's entries durable: a file created in a directory survives power
// loss only once the directory itself has been synced.
package dirsync

import (
	"fmt"
	"os"
)

// Sync fsyncs the directory dir. The error names the directory; callers add their package's name.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
