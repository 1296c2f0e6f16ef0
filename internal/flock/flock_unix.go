// SPDX-License-Identifier: Apache-2.0

//go:build unix

// Package flock takes the exclusive, non-blocking file locks that guard a database and a journal.
package flock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrHeld: another open file description holds the lock.
var ErrHeld = errors.New("held by another")

// Exclusive takes an exclusive flock on f: it belongs to this open file description alone, so a
// second holder in the same process is refused as well as one in another process. Give it up with
// Release.
func Exclusive(f *os.File) error {
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

// Release gives up the lock and closes f.
//
// Closing alone is not enough. A child this process is forking (os/exec) holds a copy of every
// descriptor until its exec closes them, and the kernel lets the parent run on before it does: for
// that moment, the copy keeps the open file description, and with it the lock, alive after f is
// closed, so that a reopen right after a Close would be refused. An explicit LOCK_UN drops the lock
// from the open file description itself, whatever copies of it remain.
func Release(f *os.File) error {
	var err error
	for {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("unlock: %w", err)
	}
	return errors.Join(err, f.Close())
}
