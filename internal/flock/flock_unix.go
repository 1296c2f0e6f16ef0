//go:build unix

// Package flock takes the exclusive, non-blocking file locks that guard a database and a journal.
package flock

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// Grace is how long Exclusive keeps trying while another holder has the lock. A process that forks
// (os/exec) copies every descriptor into the child until the child's exec closes them, so for that
// moment a lock its owner has just released is still held through the child's copy; a reopen right
// after a Close would otherwise fail for no lasting reason.
const Grace = 50 * time.Millisecond

// ErrHeld: another open file description holds the lock, and still did after Grace.
var ErrHeld = errors.New("held by another")

// Exclusive takes an exclusive flock on f: it belongs to this open file description alone, so a
// second holder in the same process is refused as well as one in another process, and it lives until
// the descriptor is closed.
func Exclusive(f *os.File) error {
	deadline := time.Now().Add(Grace)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return err
		case time.Now().After(deadline):
			return ErrHeld
		}
		time.Sleep(time.Millisecond)
	}
}
