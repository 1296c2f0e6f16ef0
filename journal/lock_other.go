//go:build !unix

package journal

import (
	"fmt"
	"os"
	"runtime"
)

func lock(*os.File) error {
	return fmt.Errorf("journal: file locking is not implemented on %s", runtime.GOOS)
}
