// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"
)

// A reader that writes nothing must leave a book that no writer holds open as it found it, work where the reader
// cannot write anything (the directory, the database, the -wal or the -shm), and still see what a
// running engine commits, never a mix of two commits. SQLite alone does not allow all three: a
// connection to a WAL database, even one opened read-only, creates the -wal and -shm files beside the
// database when they are missing; it opens the -wal and -shm read-write whenever it may, and so, as a
// user who may write them, resets and rebuilds the -shm that a crashed writer left behind; and the
// only documented way round that, immutable=1, takes no locks and ignores the -wal.
//
// The read-only VFS below opens the -wal (and any rollback journal) read-only, after checking without
// blocking that it, like the database file, is a regular file; deletes nothing; holds a SHARED lock on
// the database file from open to close (so no writer's last close checkpoints and deletes the -wal
// under the reader); and decides, each time SQLite opens the database file, which of three readers
// the connection is:
//
//   - No -wal: the database file holds every commit. The connection reads it as immutable
//     (SQLITE_IOCAP_IMMUTABLE: no -wal, no -shm, no lock taken by SQLite). SQLite rewrites a WAL
//     database's file only by checkpointing frames from a -wal, so as long as no -wal exists the file
//     is the one the connection opened; every page read checks that, and once a -wal has appeared the
//     connection refuses to read (ErrBookOpened) instead of returning pages that a checkpoint may be
//     rewriting.
//   - A -wal and a -shm that a connection has in use (its dead man's switch is locked): a writer has
//     the book open. The connection is SQLite's own WAL reader, sharing the writer's -shm; where the
//     user cannot write the -shm, SQLite reads it read-only, taking a read lock on a slot whose mark
//     some other connection set and reading the writer's latest commit under it. That lock is what
//     keeps the writer from checkpointing past, or restarting, the frames the snapshot uses, as for
//     any reader. A user who may write the -shm writes read marks in it, as every SQLite reader does.
//   - A -wal and no -shm in use: a writer stopped with the book open (it crashed, or its last close
//     found a reader's lock in its way). The connection builds the WAL index in its own memory from the
//     -wal, as SQLite does when it cannot write the -shm (exclusive locking mode, in which SQLite uses no
//     -shm; the SHARED lock is what it really holds), and writes nothing. A writer that opens the book
//     meanwhile must not checkpoint or reuse the frames the connection reads: when a -shm exists, the
//     connection holds its WAL_READ_LOCK(0) shared, which stops every checkpoint (as SQLite's reader
//     of a -shm it cannot write does, walBeginShmUnreliable); when none exists, a writer must create
//     it before it can write, and every page read checks that it still does not exist, failing with
//     ErrBookOpened once it does.
//
// Every connection stays the reader it was opened as, and an immutable or private one keeps its
// snapshot for its whole life, so a read-only Store keeps no idle connection: each operation opens its
// own, which is what lets a long-running reader (a metrics exporter) follow an engine that starts and
// stops.

// ErrBookOpened is returned by a read of a read-only reader that began while no writer had the
// database open and met one that opened it meanwhile. Nothing read is returned; the same read again
// goes through the writer's WAL and succeeds.
var ErrBookOpened = errors.New("the database was opened for writing during the read; read again")

var readOnlyVFSs sync.Map // base VFS name → the read-only VFS's name

// readOnlyVFS registers, once per base VFS, the read-only VFS that wraps it, and returns its name.
func readOnlyVFS(base string) (string, error) {
	if name, ok := readOnlyVFSs.Load(base); ok {
		return name.(string), nil
	}
	b := vfs.Find(base)
	if b == nil {
		return "", fmt.Errorf("no VFS named %q", base)
	}
	name := "outbox-readonly-" + base
	if base == "" {
		name = "outbox-readonly"
	}
	vfs.Register(name, roVFS{base: b})
	actual, _ := readOnlyVFSs.LoadOrStore(base, name)
	return actual.(string), nil
}

// OpenReadOnlyPool is OpenReader for a reader that writes nothing: through the read-only VFS, and
// with no idle connection, so that every operation decides afresh which kind of reader it is.
func OpenReadOnlyPool(path string, cfg Config, file os.FileInfo) (*sql.DB, error) {
	name, err := readOnlyVFS(cfg.VFS)
	if err != nil {
		return nil, err
	}
	cfg.VFS = name
	r, err := OpenReader(path, cfg, file)
	if err != nil {
		return nil, err
	}
	r.SetMaxIdleConns(0)
	return r, nil
}

// OpenReadOnly opens the SQLite database at path for reading through database/sql, as
// OpenReadOnlyPool reads it: it writes nothing and creates no file beside the database, works where
// the caller cannot write, and sees what a running writer has committed; a read that meets a writer
// opening a closed database fails with ErrBookOpened. It refuses a path that is not a regular file,
// and checks that path is a database, and nothing of its schema.
func OpenReadOnly(ctx context.Context, path string, cfg Config) (*sql.DB, error) {
	file, err := RegularFile(path)
	if err != nil {
		return nil, err
	}
	r, err := OpenReadOnlyPool(path, cfg, file)
	if err != nil {
		return nil, err
	}
	err = ReadAgain(ctx, func(ctx context.Context) error {
		var n int
		return r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n)
	})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("open %s: %w", path, WithEnd(ctx, err))
	}
	return r, nil
}

type roVFS struct{ base vfs.VFS }

func (v roVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	return v.base.Open(name, flags)
}

// Delete refuses: SQLite deletes a -wal beside an empty database file, and a journal it takes for
// stale, and a reader deletes nothing.
func (v roVFS) Delete(string, bool) error { return sqlite3.READONLY }

func (v roVFS) Access(name string, flags vfs.AccessFlag) (bool, error) {
	return v.base.Access(name, flags)
}

func (v roVFS) FullPathname(name string) (string, error) { return v.base.FullPathname(name) }

func (v roVFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	open := func(flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
		if ffs, ok := v.base.(vfs.VFSFilename); ok {
			return ffs.OpenFilename(name, flags)
		}
		return v.base.Open(name.String(), flags)
	}
	switch {
	case name == nil || name.String() == "":
		return open(flags) // a temporary file, not beside the book
	case flags&(vfs.OPEN_WAL|vfs.OPEN_MAIN_JOURNAL|vfs.OPEN_SUPER_JOURNAL) != 0:
		// SQLite asks for the -wal read-write and created; read-only is all a reader needs (SQLite
		// then knows the WAL is read-only and never tries to checkpoint it).
		ro := flags&^(vfs.OPEN_READWRITE|vfs.OPEN_CREATE|vfs.OPEN_EXCLUSIVE|vfs.OPEN_DELETEONCLOSE) | vfs.OPEN_READONLY
		// Checked first, as the database file is: a read-only open of a named pipe blocks.
		probe, err := openProbe(name.String())
		if err != nil {
			return nil, flags, err
		}
		defer probe.Close()
		f, _, err := open(ro)
		if err != nil {
			return nil, flags, err
		}
		if err := sameFile(f, probe); err != nil {
			f.Close()
			return nil, flags, err
		}
		var main *privateFile
		if flags&vfs.OPEN_WAL != 0 {
			main, _ = unwrapFile(name.DatabaseFile()).(*privateFile)
		}
		return &readOnlyFile{File: f, main: main}, ro, nil
	case flags&vfs.OPEN_MAIN_DB == 0:
		return open(flags)
	}
	path := name.String()
	// Stat first, and without blocking: a named pipe would block open(2) for ever. The descriptor
	// is then compared with what SQLite opens, so the file read is the one checked.
	probe, err := openProbe(path)
	if err != nil {
		return nil, flags, err
	}
	defer probe.Close()
	f, flags, err := open(flags)
	if err != nil {
		return nil, flags, err
	}
	fail := func(err error) (vfs.File, vfs.OpenFlag, error) {
		f.Close()
		return nil, flags, err
	}
	if err := sameFile(f, probe); err != nil {
		return fail(err)
	}
	if err := sharedLock(f); err != nil {
		return fail(err)
	}
	// Under the lock, a -wal that the last writer deleted is gone for good, and one created from now
	// on stays until this connection closes.
	if !exists(path+"-wal") && !exists(path+"-journal") {
		return &stableFile{File: f, wal: path + "-wal"}, flags, nil
	}
	shm, live, err := attachShm(path + "-shm")
	if err != nil {
		return fail(err)
	}
	if live || !exists(path+"-wal") {
		return &liveFile{File: f, shm: shm}, flags, nil
	}
	return &privateFile{File: f, shm: shm, shmPath: path + "-shm"}, flags, nil
}

// sharedLock takes SHARED on f, waiting out a writer that holds PENDING on the way to EXCLUSIVE (a
// rollback-mode commit, or a WAL writer's last close checkpointing) as SQLite's busy handler would.
func sharedLock(f vfs.File) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := f.Lock(vfs.LOCK_SHARED)
		if err == nil || !errors.Is(err, sqlite3.BUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// unwrapFile returns the read-only VFS's own file under the driver's wrappers, or what it was given.
func unwrapFile(f vfs.File) vfs.File {
	for {
		switch f.(type) {
		case *stableFile, *liveFile, *privateFile, *readOnlyFile:
			return f
		}
		u, ok := f.(vfs.FileUnwrap)
		if !ok {
			return f
		}
		f = u.Unwrap()
	}
}

// The database files below hold SHARED from open to close, taken by the VFS: a reader needs no other
// lock, and gives this one up only by closing. They refuse every write.

// lockHeld grants SHARED, which is held, and refuses more: SQLite asks for EXCLUSIVE only to
// checkpoint and delete the -wal at its last close.
func lockHeld(l vfs.LockLevel) error {
	if l > vfs.LOCK_SHARED {
		return sqlite3.BUSY
	}
	return nil
}

// stableFile is the database file of a book that has no -wal: immutable to SQLite, as long as no -wal
// appears (see the comment at the top of this file).
type stableFile struct {
	vfs.File
	wal string
}

func (f *stableFile) Lock(l vfs.LockLevel) error         { return lockHeld(l) }
func (f *stableFile) Unlock(vfs.LockLevel) error         { return nil }
func (f *stableFile) CheckReservedLock() (bool, error)   { return false, nil }
func (f *stableFile) WriteAt([]byte, int64) (int, error) { return 0, sqlite3.READONLY }
func (f *stableFile) Truncate(int64) error               { return sqlite3.READONLY }

func (f *stableFile) Unwrap() vfs.File { return f.File }

func (f *stableFile) DeviceCharacteristics() vfs.DeviceCharacteristic {
	return f.File.DeviceCharacteristics() | vfs.IOCAP_IMMUTABLE
}

func (f *stableFile) ReadAt(p []byte, off int64) (int, error) {
	if exists(f.wal) {
		return 0, vfs.SystemError(ErrBookOpened, sqlite3.IOERR_READ)
	}
	return f.File.ReadAt(p, off)
}

// liveFile is the database file of a book whose -shm a connection has in use: SQLite's own reader,
// through the driver's shared memory. shm holds the DMS shared until the connection closes.
type liveFile struct {
	vfs.File
	shm *os.File
}

func (f *liveFile) Lock(l vfs.LockLevel) error         { return lockHeld(l) }
func (f *liveFile) Unlock(vfs.LockLevel) error         { return nil }
func (f *liveFile) WriteAt([]byte, int64) (int, error) { return 0, sqlite3.READONLY }
func (f *liveFile) Truncate(int64) error               { return sqlite3.READONLY }

func (f *liveFile) Unwrap() vfs.File { return f.File }

func (f *liveFile) SharedMemory() vfs.SharedMemory {
	if s, ok := f.File.(vfs.FileSharedMemory); ok {
		return s.SharedMemory()
	}
	return nil
}

func (f *liveFile) CheckReservedLock() (bool, error) { return f.File.CheckReservedLock() }

func (f *liveFile) Close() error {
	err := f.File.Close()
	if f.shm != nil {
		f.shm.Close()
	}
	return err
}

// privateFile is the database file of a book with a -wal and no -shm in use: read in exclusive
// locking mode, so that SQLite keeps the WAL index in the connection's memory (see the comment at the
// top of this file). It offers no shared memory, and grants every lock SQLite asks for, since the
// SHARED it really holds is all a reader needs.
type privateFile struct {
	vfs.File
	shm     *os.File // holding WAL_READ_LOCK(0) shared; nil when there was no -shm
	shmPath string
}

func (f *privateFile) Unwrap() vfs.File                   { return f.File }
func (f *privateFile) Lock(vfs.LockLevel) error           { return nil }
func (f *privateFile) Unlock(vfs.LockLevel) error         { return nil }
func (f *privateFile) CheckReservedLock() (bool, error)   { return false, nil }
func (f *privateFile) WriteAt([]byte, int64) (int, error) { return 0, sqlite3.READONLY }
func (f *privateFile) Truncate(int64) error               { return sqlite3.READONLY }

func (f *privateFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if err := f.unchanged(); err != nil {
		return 0, err
	}
	return n, err
}

// unchanged fails once a writer may have changed the files under the connection: with no -shm held,
// one that has created it. Checked after each read, so the bytes read are ones no writer touched.
func (f *privateFile) unchanged() error {
	if f.shm == nil && exists(f.shmPath) {
		return vfs.SystemError(ErrBookOpened, sqlite3.IOERR_READ)
	}
	return nil
}

func (f *privateFile) Close() error {
	err := f.File.Close()
	if f.shm != nil {
		f.shm.Close()
	}
	return err
}

// readOnlyFile is a -wal or rollback journal opened read-only. The -wal of a privateFile is checked
// after each read as the database file is.
type readOnlyFile struct {
	vfs.File
	main *privateFile
}

func (f *readOnlyFile) Unwrap() vfs.File                   { return f.File }
func (f *readOnlyFile) WriteAt([]byte, int64) (int, error) { return 0, sqlite3.READONLY }
func (f *readOnlyFile) Truncate(int64) error               { return sqlite3.READONLY }

func (f *readOnlyFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.main != nil {
		if err := f.main.unchanged(); err != nil {
			return 0, err
		}
	}
	return n, err
}

// privateIndex sets exclusive locking mode on a connection whose database file is a privateFile,
// before SQLite has read it: only then does SQLite build the WAL index in the connection's memory.
func privateIndex(c *sqlite3.Conn) error {
	if _, ok := unwrapFile(connFile(c)).(*privateFile); !ok {
		return nil
	}
	return c.Exec("PRAGMA locking_mode=EXCLUSIVE")
}

// connFile returns the main database's file as the VFS opened it, or nil.
func connFile(c *sqlite3.Conn) vfs.File {
	h, err := c.FileControl("main", sqlite3.FCNTL_FILE_POINTER)
	if err != nil {
		return nil
	}
	f, _ := h.(vfs.File)
	return f
}
