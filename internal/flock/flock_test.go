//go:build unix

package flock

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
func TestALockReleasedWhileAForkedChildHoldsACopyIsTakenOnceTheChildExecs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	owner := open(t, path)
	if err := Exclusive(owner); err != nil {
		t.Fatal(err)
	}
	syscall.ForkLock.Lock()
	childFd, err := syscall.Dup(int(owner.Fd())) // the same open file description, as the child's copy
	if err != nil {
		syscall.ForkLock.Unlock()
		t.Fatal(err)
	}
	owner.Close()
	go func() {
		time.Sleep(20 * time.Millisecond)
		syscall.Close(childFd) // the child's exec closes its copy
		syscall.ForkLock.Unlock()
	}()
	if err := Exclusive(open(t, path)); err != nil {
		t.Fatalf("lock after the child exec'd: %v", err)
	}
}
