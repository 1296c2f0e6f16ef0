//go:build unix

// Package flock takes the exclusive, non-blocking file locks that guard a database and a journal.
package flock

import (
	"errors"
	"os"
	"syscall"
)

// ErrHeld: another open file description holds the lock.
var ErrHeld = errors.New("held by another")

// Exclusive takes an exclusive flock on f: it belongs to this open file description alone, so a
// second holder in the same process is refused as well as one in another process, and it lives until
// the descriptor is closed.
//
// A child this process is forking (os/exec) holds a copy of every descriptor until its exec closes
// them, and through that copy a lock its owner has just released. The attempt is therefore made under
// syscall.ForkLock, which a fork holds until the child has exec'd: a lock released before the attempt
// is free when it is made, and a reopen right after a Close is not refused for a child's moment.
func Exclusive(f *os.File) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrHeld
		}
		return err
	}
}
