// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package litedb

import (
	"fmt"
	"os"
	"runtime"
)

func lockFile(path string, n Names) (*os.File, error) {
	return nil, fmt.Errorf("%sthe writer's lock is not implemented on %s", n.Prefix, runtime.GOOS)
}

// Unlock closes f.
func Unlock(f *os.File) error { return f.Close() }
