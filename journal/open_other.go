// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package journal

import "os"

// openNonblock: no FIFO to wait for here.
const openNonblock = 0

func setBlocking(*os.File) error { return nil }
