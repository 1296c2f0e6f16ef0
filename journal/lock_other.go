// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package journal

import (
	"fmt"
	"os"
	"runtime"
)

func lock(*os.File) error {
	return fmt.Errorf("file locking is not implemented on %s", runtime.GOOS)
}

func unlock(f *os.File) error { return f.Close() }
