// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package outbox

import (
	"fmt"
	"os"
	"runtime"
)

func lockFile(path string) (*os.File, error) {
	return nil, fmt.Errorf("outbox: the writer lock is not implemented on %s", runtime.GOOS)
}

func unlockFile(f *os.File) error { return f.Close() }
