// SPDX-License-Identifier: Apache-2.0

// Package smallfs gives tests a real small file system to fill: a full disk reaches SQLite and the
// journal only through the kernel, and a fault injected above it (SQLITE_FULL from a test VFS) never
// meets the path a real ENOSPC takes.
package smallfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Size is the size of the file system Mount mounts: 2 MiB, room for a small book and its WAL.
const Size = 2 << 20

// Mount mounts a tmpfs of Size bytes on a new directory of the test's and returns it; the test's
// cleanup unmounts it. It skips the test, saying why, where it cannot: not Linux, not root, or a
// mount refused (a container without CAP_SYS_ADMIN).
func Mount(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mount(dir); err != nil {
		t.Skipf("a full disk needs a small file system, and mounting a %d KiB tmpfs failed: %v", Size>>10, err)
	}
	t.Cleanup(func() {
		if err := unmountWhenFree(dir, busyBound); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// busyBound is how long an unmount may find the file system busy, or a removed file's space stay
// taken, before the test is told: a bound for a file left open for good, far beyond any moment a
// closed file is still held.
const busyBound = 2 * time.Minute

// unmountWhenFree unmounts dir, trying again while the kernel says it is busy. A file the test has
// closed can still be open for a moment in another process: a child that a parallel test is starting
// holds a copy of every descriptor of the test binary from its fork until its exec, and on a loaded
// machine that gap is long. What is still busy after bound is a file truly left open.
func unmountWhenFree(dir string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		err := unmount(dir)
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Fill writes a file in dir until the file system refuses a write for lack of space, down to single
// bytes, and returns a function that removes it again. Nothing else in dir may grow meanwhile.
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var filled uint64
	for chunk := len(buf); chunk >= 1; chunk /= 2 {
		for {
			n, err := f.Write(buf[:chunk])
			filled += uint64(n)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("fill %s: %v", dir, err)
			}
		}
	}
	return func() {
		if err := os.Remove(name); err != nil {
			t.Errorf("free %s: %v", dir, err)
			return
		}
		if err := spaceBack(dir, filled, busyBound); err != nil {
			t.Errorf("free %s: %v", dir, err)
		}
	}
}

// spaceBack waits until the file system of dir has the filler's bytes free again, but for the
// last page they may have shared with nothing. A removed file's space comes back only when the
// last descriptor of it is closed, and the filler's can still be open in a child a parallel test is
// starting (see unmountWhenFree): a write right after the removal could still find the disk full.
func spaceBack(dir string, filled uint64, bound time.Duration) error {
	want := filled &^ (uint64(os.Getpagesize()) - 1)
	deadline := time.Now().Add(bound)
	for {
		free, err := freeBytes(dir)
		if err != nil || free >= want {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d bytes free %v after the filler of %d was removed: it is still open somewhere", free, bound, filled)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
