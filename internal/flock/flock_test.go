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

// TestALockHeldByAnotherIsRefusedAfterTheGrace: a second open file description, in the same process,
// does not get the lock.
func TestALockHeldByAnotherIsRefusedAfterTheGrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := Exclusive(open(t, path)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := Exclusive(open(t, path)); !errors.Is(err, ErrHeld) {
		t.Fatalf("second lock: %v, want ErrHeld", err)
	}
	if waited := time.Since(t0); waited < Grace {
		t.Errorf("refused after %v, before the grace of %v", waited, Grace)
	}
}

// TestALockReleasedWhileACopyOfItsDescriptorLingersIsTakenOnceTheCopyCloses stands in for a forked
// child that still holds a copy of the owner's descriptor until it execs: the owner closes its own,
// and a new Exclusive gets the lock once the copy is gone, within the grace.
func TestALockReleasedWhileACopyOfItsDescriptorLingersIsTakenOnceTheCopyCloses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	owner := open(t, path)
	if err := Exclusive(owner); err != nil {
		t.Fatal(err)
	}
	copyFd, err := syscall.Dup(int(owner.Fd())) // the same open file description, as a child's copy
	if err != nil {
		t.Fatal(err)
	}
	owner.Close()
	go func() {
		time.Sleep(Grace / 5)
		syscall.Close(copyFd)
	}()
	if err := Exclusive(open(t, path)); err != nil {
		t.Fatalf("lock after the copy closed: %v", err)
	}
}
