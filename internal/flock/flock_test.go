// SPDX-License-Identifier: Apache-2.0

//go:build unix

package flock

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestALockHeldByAnotherIsRefused: a second open file description, in the same process, does not get
// the lock.
func TestALockHeldByAnotherIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := Exclusive(open(t, path)); err != nil {
		t.Fatal(err)
	}
	if err := Exclusive(open(t, path)); !errors.Is(err, ErrHeld) {
		t.Fatalf("second lock: %v, want ErrHeld", err)
	}
}

// TestALockReleasedWhileAForkedChildHoldsACopyIsTakenOnceTheChildExecs stands in for a fork in
// progress: it holds syscall.ForkLock, as a fork does until its child has exec'd, and a copy of the
// owner's descriptor, as the child has. The owner closes its own; Exclusive waits for the fork, and
// gets the lock once the copy is gone.
// TestAReleasedLockIsFreeWhileACopyOfItsDescriptorIsStillOpen: a child being forked holds a copy of
// every descriptor until its exec; a lock given up with Release is free at once all the same, where
// one whose descriptor was only closed is held by the copy.
func TestAReleasedLockIsFreeWhileACopyOfItsDescriptorIsStillOpen(t *testing.T) {
	for _, release := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "f")
		owner := open(t, path)
		if err := Exclusive(owner); err != nil {
			t.Fatal(err)
		}
		childFd, err := syscall.Dup(int(owner.Fd())) // the same open file description, as a child's copy
		if err != nil {
			t.Fatal(err)
		}
		if release {
			if err := Release(owner); err != nil {
				t.Fatal(err)
			}
		} else {
			owner.Close()
		}
		err = Exclusive(open(t, path))
		syscall.Close(childFd)
		switch {
		case release && err != nil:
			t.Errorf("lock after Release, while a copy is open: %v", err)
		case !release && !errors.Is(err, ErrHeld):
			t.Errorf("lock after a plain close, while a copy is open: %v, want ErrHeld", err)
		}
	}
}
