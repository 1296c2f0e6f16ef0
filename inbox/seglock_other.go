// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package inbox

import "os"

// lockShared does nothing where the system has no flock: retention there cannot tell a segment a
// reader has open, and keeps what the readers' registered positions say they have not read.
func lockShared(f *os.File) error { return nil }

func unlockShared(f *os.File) {}
