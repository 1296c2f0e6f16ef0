//go:build unix

package journal

import (
	"os"
	"syscall"
)

// lock takes an exclusive flock: it belongs to this open file description, so a second OpenFile in
// the same process is refused as well as one in another process.
func lock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}
