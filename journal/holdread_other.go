// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package journal

import "os"

// holdForReading does nothing where flock is missing: no retention runs there either, since Open
// needs the journal's lock.
func holdForReading(*os.File) error { return nil }
