// SPDX-License-Identifier: Apache-2.0

// Package faultvfs is an SQLite VFS for tests that wraps the driver's own and injects what a real disk
// does to a database: I/O errors on chosen calls, and power loss, after which only what was synced
// remains. Register one under a fresh name per test and open the store with outbox.WithVFS.
package faultvfs

import (
	"errors"
	"os"
	"strings"
	"sync"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"
)

// VFS counts the writes and syncs of every file it opens. When the count reaches Cut, the power goes:
// that call and every later write, sync, truncate or delete fails. When it reaches FailAt, that one
// call fails with an I/O error and the next ones succeed. Crash then leaves each file as the last sync
// left it.
type VFS struct {
	base vfs.VFS

	mu     sync.Mutex
	Cut    int // 0: never
	FailAt int // 0: never
	// FailWith is the error of the FailAt call: an I/O error when nil, sqlite3.FULL for a full disk.
	FailWith error
	// PanicAt makes that call panic, as the driver does when SQLite runs out of memory. 0: never.
	PanicAt int
	// BeforeSync, if set, is called with the file's name before each sync goes to the disk, outside
	// the VFS's lock: a test can hold a sync there.
	BeforeSync func(name string)
	calls      int
	off        bool
	files      map[string]*image
}

// image is what a file holds now and what it held at its last sync.
type image struct {
	now, durable []byte
	synced       bool // durable is known (the file has been synced, or existed when opened)
}

// New returns a VFS over the driver's default one.
func New() *VFS { return &VFS{base: vfs.Find(""), files: map[string]*image{}} }

// Calls returns how many writes and syncs have been counted.
func (v *VFS) Calls() int { v.mu.Lock(); defer v.mu.Unlock(); return v.calls }

// PowerOff cuts the power now: every later write, sync, truncate or delete fails.
func (v *VFS) PowerOff() { v.mu.Lock(); defer v.mu.Unlock(); v.off = true }

// Off reports whether the power has gone.
func (v *VFS) Off() bool { v.mu.Lock(); defer v.mu.Unlock(); return v.off }

// count counts one write or sync and says whether it must fail.
func (v *VFS) count() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.off {
		return sqlite3.IOERR
	}
	v.calls++
	if v.calls == v.PanicAt {
		v.mu.Unlock()
		defer v.mu.Lock()
		panic("faultvfs: injected panic")
	}
	switch v.calls {
	case v.Cut:
		v.off = true
		return sqlite3.IOERR
	case v.FailAt:
		if v.FailWith != nil {
			return v.FailWith
		}
		return sqlite3.IOERR
	}
	return nil
}

// Crash leaves every file the VFS wrote as its last sync left it (a file never synced, as it was when
// opened, or gone), and removes the WAL index, which lives in memory and does not survive a power cut.
// Call it after closing the store.
func (v *VFS) Crash() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var errs []error
	for name, img := range v.files {
		if !img.synced {
			errs = append(errs, os.Remove(name))
			continue
		}
		errs = append(errs, os.WriteFile(name, img.durable, 0o644))
		if strings.HasSuffix(name, "-wal") {
			errs = append(errs, os.Remove(strings.TrimSuffix(name, "-wal")+"-shm"))
		}
	}
	var kept []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			kept = append(kept, err)
		}
	}
	return errors.Join(kept...)
}

// Open is not used: the driver calls OpenFilename when a VFS has it, as this one does.
func (v *VFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	return v.base.Open(name, flags)
}

// OpenFilename opens through the driver's own VFS and tracks the file; temporary files (no name) are
// not tracked.
func (v *VFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	f, flags, err := v.base.(vfs.VFSFilename).OpenFilename(name, flags)
	if err != nil || name == nil {
		return f, flags, err
	}
	path := name.String()
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.files[path]; !ok {
		img := &image{}
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			img.now, img.durable, img.synced = b, append([]byte(nil), b...), true
		}
		v.files[path] = img
	}
	return &file{File: f, v: v, img: v.files[path], name: path}, flags, nil
}

func (v *VFS) Delete(name string, syncDir bool) error {
	if v.Off() {
		return sqlite3.IOERR
	}
	v.mu.Lock()
	delete(v.files, name)
	v.mu.Unlock()
	return v.base.Delete(name, syncDir)
}

func (v *VFS) Access(name string, flags vfs.AccessFlag) (bool, error) {
	return v.base.Access(name, flags)
}
func (v *VFS) FullPathname(name string) (string, error) { return v.base.FullPathname(name) }

type file struct {
	vfs.File
	v    *VFS
	img  *image
	name string
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if err := f.v.count(); err != nil {
		return 0, err
	}
	n, err := f.File.WriteAt(p, off)
	f.v.mu.Lock()
	if end := off + int64(n); end > int64(len(f.img.now)) {
		f.img.now = append(f.img.now, make([]byte, end-int64(len(f.img.now)))...)
	}
	copy(f.img.now[off:], p[:n])
	f.v.mu.Unlock()
	return n, err
}

func (f *file) Truncate(size int64) error {
	if f.v.Off() {
		return sqlite3.IOERR
	}
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	f.v.mu.Lock()
	if size < int64(len(f.img.now)) {
		f.img.now = f.img.now[:size]
	} else {
		f.img.now = append(f.img.now, make([]byte, size-int64(len(f.img.now)))...)
	}
	f.v.mu.Unlock()
	return nil
}

// Sync makes durable what the file held when the sync began: a write that races with it (the store
// syncs the WAL while its next transaction writes) may or may not reach the disk, and is taken as lost.
func (f *file) Sync(flags vfs.SyncFlag) error {
	if err := f.v.count(); err != nil {
		return err
	}
	f.v.mu.Lock()
	snapshot := append([]byte(nil), f.img.now...)
	hook := f.v.BeforeSync
	f.v.mu.Unlock()
	if hook != nil {
		hook(f.name)
	}
	if err := f.File.Sync(flags); err != nil {
		return err
	}
	f.v.mu.Lock()
	f.img.durable, f.img.synced = snapshot, true
	f.v.mu.Unlock()
	return nil
}

// SharedMemory hands the wrapped file's WAL index through: WAL mode needs it.
func (f *file) SharedMemory() vfs.SharedMemory {
	if s, ok := f.File.(vfs.FileSharedMemory); ok {
		return s.SharedMemory()
	}
	return nil
}

func (f *file) Unwrap() vfs.File { return f.File }
