package outbox

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

// A read-only Store must leave a closed book's directory as it found it, work where the reader cannot
// write, and still see what a running engine commits. SQLite alone does not allow all three: a
// connection to a WAL database, even one opened read-only, creates the -wal and -shm files beside the
// database when they are missing (and fails where it cannot), and the only documented way round that,
// immutable=1, takes no locks and so reads a file that a starting engine may be rewriting.
//
// The read-only VFS below decides, each time SQLite opens the database file, which of two readers to be:
//
//   - When a -wal file exists, a writer has the book open (or crashed with it open): the connection is
//     an ordinary read-only WAL reader, sharing the writer's -shm.
//   - When none exists, the database file holds every commit, and the connection reads it as immutable
//     (SQLITE_IOCAP_IMMUTABLE: no -wal, no -shm, no lock taken by SQLite) while the VFS itself holds a
//     SHARED lock on the file until the connection closes. SQLite rewrites a WAL database's file only
//     by checkpointing frames from a -wal, and deletes the -wal only under an EXCLUSIVE lock, which
//     that SHARED lock refuses (the engine's last close then leaves its -wal behind instead of
//     deleting it, as a crash would). So as long as no -wal exists, the file is the one the connection
//     opened; every page read first checks that, and once a -wal has appeared the connection refuses
//     to read (ErrBookOpened) instead of returning pages that a checkpoint may be rewriting.
//
// An immutable connection also keeps its page cache for its whole life, so a read-only Store keeps no
// idle connection: each operation opens its own, which is what lets a long-running reader (a metrics
// exporter) move from the first kind to the second when an engine starts, and back when it stops.

// ErrBookOpened is returned by a read of a read-only Store that began while no writer had the book
// open and met one that opened it meanwhile. Nothing read is returned; the same read again goes
// through the writer's WAL and succeeds.
var ErrBookOpened = errors.New("outbox: the book was opened for writing during the read; read again")

var readOnlyVFSs sync.Map // base VFS name → the read-only VFS's name

// readOnlyVFS registers, once per base VFS, the read-only VFS that wraps it, and returns its name.
func readOnlyVFS(base string) (string, error) {
	if name, ok := readOnlyVFSs.Load(base); ok {
		return name.(string), nil
	}
	b := vfs.Find(base)
	if b == nil {
		return "", fmt.Errorf("outbox: no VFS named %q", base)
	}
	name := "outbox-readonly-" + base
	if base == "" {
		name = "outbox-readonly"
	}
	vfs.Register(name, roVFS{base: b})
	actual, _ := readOnlyVFSs.LoadOrStore(base, name)
	return actual.(string), nil
}

// openReadOnlyPool is openReader for a read-only Store: through the read-only VFS, and with no idle
// connection, so that every operation decides afresh which kind of reader it is.
func (s *Store) openReadOnlyPool() (*sql.DB, error) {
	name, err := readOnlyVFS(s.cfg.vfs)
	if err != nil {
		return nil, err
	}
	s.cfg.vfs = name
	r, err := s.openReader()
	if err != nil {
		return nil, err
	}
	r.SetMaxIdleConns(0)
	return r, nil
}

// OpenReadOnlyDB opens the SQLite database at path for reading through database/sql, the way a
// Store from OpenReadOnly reads it: it creates no file beside the database, works where the caller
// cannot write, and sees what a running writer has committed; a read that meets a writer opening a
// closed book fails with ErrBookOpened. It checks that path is a database, and nothing of its schema,
// so it serves tools that inspect a book of any version. Every operation takes a connection of its
// own; close the *sql.DB when done.
func OpenReadOnlyDB(ctx context.Context, path string, opts ...Option) (*sql.DB, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r, err := s.openReadOnlyPool()
	if err != nil {
		return nil, err
	}
	var n int
	if err := r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		r.Close()
		return nil, fmt.Errorf("open %s: %w", path, mapErr(ctx, err))
	}
	return r, nil
}

type roVFS struct{ base vfs.VFS }

func (v roVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	return v.base.Open(name, flags)
}

func (v roVFS) Delete(name string, syncDir bool) error { return v.base.Delete(name, syncDir) }

func (v roVFS) Access(name string, flags vfs.AccessFlag) (bool, error) {
	return v.base.Access(name, flags)
}

func (v roVFS) FullPathname(name string) (string, error) { return v.base.FullPathname(name) }

func (v roVFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	open := func() (vfs.File, vfs.OpenFlag, error) {
		if ffs, ok := v.base.(vfs.VFSFilename); ok {
			return ffs.OpenFilename(name, flags)
		}
		return v.base.Open(name.String(), flags)
	}
	if flags&vfs.OPEN_MAIN_DB == 0 || name == nil {
		return open()
	}
	path := name.String()
	if exists(path+"-wal") || exists(path+"-journal") {
		// A writer has the book open, or left it mid-transaction: SQLite's own reader applies.
		return open()
	}
	f, flags, err := open()
	if err != nil {
		return nil, flags, err
	}
	if err := sharedLock(f); err != nil {
		f.Close()
		return nil, flags, err
	}
	// Checked again under the lock: a -wal that the last writer deleted just before we locked is
	// gone for good, and one created after it stays until we close.
	if exists(path + "-wal") {
		f.Close()
		return open()
	}
	return &stableFile{File: f, wal: path + "-wal"}, flags, nil
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

// stableFile is the database file of a book that no writer had open: immutable to SQLite, as long as
// no -wal appears (see the comment at the top of this file).
type stableFile struct {
	vfs.File
	wal string
}

func (f *stableFile) DeviceCharacteristics() vfs.DeviceCharacteristic {
	return f.File.DeviceCharacteristics() | vfs.IOCAP_IMMUTABLE
}

func (f *stableFile) ReadAt(p []byte, off int64) (int, error) {
	if exists(f.wal) {
		return 0, vfs.SystemError(ErrBookOpened, sqlite3.IOERR_READ)
	}
	return f.File.ReadAt(p, off)
}

// SQLite takes no lock on an immutable file; the one taken at open is held until Close.
func (f *stableFile) Lock(vfs.LockLevel) error           { return nil }
func (f *stableFile) Unlock(vfs.LockLevel) error         { return nil }
func (f *stableFile) CheckReservedLock() (bool, error)   { return false, nil }
func (f *stableFile) WriteAt([]byte, int64) (int, error) { return 0, sqlite3.READONLY }
func (f *stableFile) Truncate(int64) error               { return sqlite3.READONLY }
