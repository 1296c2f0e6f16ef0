// SPDX-License-Identifier: Apache-2.0

//go:build linux

package litedb

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// The bytes of a -shm file that SQLite's unix locking (and the driver's, which is compatible with it)
// takes open-file-description locks on: WAL_READ_LOCK(0) and the dead man's switch (DMS), which every
// connection using the -shm holds shared for as long as it is attached.
const (
	shmReadLock0 = 120 + 3
	shmDMS       = 120 + 8

	fOFDGetLk = 36 // F_OFD_GETLK
	fOFDSetLk = 37 // F_OFD_SETLK
)

// openProbe opens path for reading without blocking (a named pipe with no writer would block a plain
// open for ever) and without following a symbolic link, and refuses anything but a regular file.
func openProbe(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = notRegular(path, st)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// attachShm looks at the -shm at path without creating or writing it, and says which reader the
// connection must be:
//
//   - live: a connection has it in use (its DMS byte is locked). The returned file holds DMS shared,
//     as every SQLite connection does while it uses the -shm, so that the -shm stays the live one
//     (no later connection takes it for a crashed one's and rebuilds it) until the reader closes.
//   - not live, with a file: no connection has it, and the returned file holds WAL_READ_LOCK(0)
//     shared, which keeps any writer that opens the book meanwhile from checkpointing, and so from
//     changing the database file or reusing the WAL (SQLite's own reader of a -shm it cannot write
//     does the same; see walBeginShmUnreliable in wal.c).
//   - not live, no file: there is no -shm.
func attachShm(path string) (f *os.File, live bool, err error) {
	f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = notRegular(path, st)
		}
		return nil, false, err
	}
	// A connection that finds the DMS free takes it exclusively for a moment to reset the -shm, and
	// a checkpointer holds WAL_READ_LOCK(0) exclusively while it copies pages: both are brief, and
	// waited out as SQLite's busy handler would.
	deadline := time.Now().Add(5 * time.Second)
	for {
		live, busy, err := tryAttach(f)
		switch {
		case err != nil:
			f.Close()
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		case !busy:
			return f, live, nil
		case time.Now().After(deadline):
			f.Close()
			return nil, false, fmt.Errorf("lock %s: %w", path, syscall.EAGAIN)
		}
		time.Sleep(time.Millisecond)
	}
}

func tryAttach(f *os.File) (live, busy bool, err error) {
	held, err := ofdHeld(f, shmDMS)
	if err != nil || held == syscall.F_WRLCK {
		return false, held == syscall.F_WRLCK, err
	}
	if held == syscall.F_RDLCK {
		if err := ofdLock(f, syscall.F_RDLCK, shmDMS); err != nil {
			return false, isBusy(err), nilIfBusy(err)
		}
		return true, false, nil
	}
	if err := ofdLock(f, syscall.F_RDLCK, shmReadLock0); err != nil {
		return false, isBusy(err), nilIfBusy(err)
	}
	// Checked again under WAL_READ_LOCK(0): a writer that attached before it was taken may have
	// checkpointed already, so the reader must be a live one instead.
	if held, err = ofdHeld(f, shmDMS); err != nil || held != syscall.F_UNLCK {
		ofdLock(f, syscall.F_UNLCK, shmReadLock0)
		return false, err == nil, err
	}
	return false, false, nil
}

// ofdHeld reports the type of a lock another open file description holds on byte off of f, or
// F_UNLCK.
func ofdHeld(f *os.File, off int64) (int16, error) {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: off, Len: 1}
	if err := fcntl(f, fOFDGetLk, &lk); err != nil {
		return 0, err
	}
	return lk.Type, nil
}

func ofdLock(f *os.File, typ int16, off int64) error {
	lk := syscall.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	return fcntl(f, fOFDSetLk, &lk)
}

func fcntl(f *os.File, cmd int, lk *syscall.Flock_t) error {
	for {
		err := syscall.FcntlFlock(f.Fd(), cmd, lk)
		if err != syscall.EINTR {
			return err
		}
	}
}

func isBusy(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

func nilIfBusy(err error) error {
	if isBusy(err) {
		return nil
	}
	return err
}
