// SPDX-License-Identifier: Apache-2.0

package smallfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mounted mounts a small file system for a test that unmounts it itself.
func mounted(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mount(dir); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	return dir
}

func TestAnUnmountWaitsForAFileStillOpenForAMomentToBeClosed(t *testing.T) {
	dir := mounted(t)
	f, err := os.Create(filepath.Join(dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unmount(dir); !errors.Is(err, syscall.EBUSY) {
		f.Close()
		t.Fatalf("unmount with a file open: %v, want EBUSY", err)
	}
	time.AfterFunc(50*time.Millisecond, func() { f.Close() })
	if err := unmountWhenFree(dir, busyBound); err != nil {
		t.Fatalf("unmount once the file is closed: %v", err)
	}
}

func TestAFileLeftOpenStillFailsTheUnmount(t *testing.T) {
	dir := mounted(t)
	f, err := os.Create(filepath.Join(dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unmountWhenFree(dir, 0); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("unmount with a file left open: %v, want EBUSY", err)
	}
	f.Close()
	if err := unmount(dir); err != nil {
		t.Fatal(err)
	}
}

func TestTheFillersSpaceIsBackOnceFreeReturnsThoughTheFillerWasStillOpenForAMoment(t *testing.T) {
	dir := Mount(t)
	free := Fill(t, dir)
	held, err := os.Open(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { held.Close() })
	free()
	if err := os.WriteFile(filepath.Join(dir, "after"), make([]byte, Size/2), 0o644); err != nil {
		t.Fatalf("a write once free has returned: %v", err)
	}
}
