// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/internal/dirsync"
)

// Lock takes the writer's lock on the database at path, creating the file when it is missing: an
// exclusive flock on a descriptor of its own, refused at once when another writer, in this process or
// another, holds it (n.Locked), and refused for a file with more than one name (n.HardLinked) or one
// that is not a regular file. It returns the lock, the file it locked (every connection must be on
// that one: see Open), and whether the file was created, whose directory entry it has made durable.
func Lock(path string, n Names) (lock *os.File, file os.FileInfo, created bool, err error) {
	_, statErr := RegularFile(path)
	created = errors.Is(statErr, os.ErrNotExist)
	if statErr != nil && !created {
		return nil, nil, false, statErr
	}
	if lock, err = lockFile(path, n); err != nil {
		return nil, nil, false, err
	}
	// The file locked is the one checked: a name replaced in between is refused.
	if file, err = lock.Stat(); err == nil && !file.Mode().IsRegular() {
		err = notRegular(path, file)
	}
	if err == nil && created {
		// The directory entry of a new file is durable only once its directory is synced.
		err = dirsync.Sync(filepath.Dir(path))
	}
	if err != nil {
		Unlock(lock)
		return nil, nil, false, err
	}
	return lock, file, created, nil
}

// Open opens the database at path through the driver, with query as the DSN's parameters (mode,
// _txlock) and cfg's VFS. Every pragma goes through init, which runs on each new connection, never
// through the DSN: a DSN spelled wrongly is taken whole as the file's name and its pragmas are
// silently ignored, while init's failure fails the connection. A connection that SQLite opened on
// another file than file (one put in the path's place since it was locked or checked) is refused;
// file may be nil.
func Open(path, query string, cfg Config, file os.FileInfo, init func(*sqlite3.Conn) error) (*sql.DB, error) {
	if cfg.VFS != "" {
		query += "&vfs=" + url.QueryEscape(cfg.VFS)
	}
	u := url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: query}
	c, err := (&driver.SQLite{}).OpenConnector(u.String())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return sql.OpenDB(memConnector{c, func(c *sqlite3.Conn) error {
		if file != nil {
			if err := isFile(connFile(c), file, path); err != nil {
				return err
			}
		}
		if err := c.BusyTimeout(cfg.BusyTimeout); err != nil {
			return err
		}
		if init == nil {
			return nil
		}
		return init(c)
	}}), nil
}

// OpenWriter opens the writer's pool of one connection, in WAL mode, at the synchronous level sync
// ("FULL" or "NORMAL"; set on every connection, since SQLite gives a connection to an existing WAL
// database NORMAL whatever the one that created it had). BEGIN takes the write lock at once
// (BEGIN IMMEDIATE), so a transaction that read cannot fail at its first write. init, when not nil,
// runs first on each connection.
func OpenWriter(path string, cfg Config, file os.FileInfo, sync string, init func(*sqlite3.Conn) error) (*sql.DB, error) {
	w, err := Open(path, "_txlock=immediate", cfg, file, func(c *sqlite3.Conn) error {
		if init != nil {
			if err := init(c); err != nil {
				return err
			}
		}
		return c.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=" + sync)
	})
	if err != nil {
		return nil, err
	}
	// One writer connection: every transaction sees the commits of the ones before it.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	return w, nil
}

// OpenReader opens a pool of read connections. mode=ro: a read connection never creates the file,
// never writes to it, and as the last connection to close does not checkpoint the WAL into it.
func OpenReader(path string, cfg Config, file os.FileInfo) (*sql.DB, error) {
	r, err := Open(path, "mode=ro&_txlock=deferred", cfg, file, func(c *sqlite3.Conn) error {
		if err := privateIndex(c); err != nil {
			return err
		}
		return c.Exec("PRAGMA query_only=1")
	})
	if err != nil {
		return nil, err
	}
	r.SetMaxOpenConns(cfg.ReadPool)
	r.SetMaxIdleConns(cfg.ReadPool)
	return r, nil
}

// connMemory is the memory each SQLite connection may use. SQLite holds a line whole while it writes
// or reads it, and a transaction's pages and a b-tree's neighbouring cells besides; the driver's
// default of 256 MiB left a few large lines able to exhaust it, and the driver panics when SQLite runs
// out. The space is reserved, not used: a connection commits memory only as it grows.
const connMemory = 1 << 30

// memConnector opens the driver's connections with connMemory and runs init on each.
type memConnector struct {
	sqldriver.Connector
	init func(*sqlite3.Conn) error
}

func (m memConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	c, err := m.Connector.Connect(sqlite3.WithMaxMemory(ctx, connMemory))
	if err != nil {
		return nil, err
	}
	if err := m.init(c.(driver.Conn).Raw()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Closed reports the error of a pool that was closed: database/sql says so only in its text.
func Closed(err error) bool {
	return errors.Is(err, sql.ErrConnDone) || err != nil && strings.Contains(err.Error(), "sql: database is closed")
}

// ReadAgain runs fn, and runs it again while it fails having read nothing (see ReadNothing), as many
// as readRetries times, while ctx lasts.
func ReadAgain(ctx context.Context, fn func(ctx context.Context) error) error {
	return readAgain(ctx, fn, ReadNothing)
}

// ReadAgainOpened is ReadAgain for a caller of a read-only reader's reads (OpenReadOnlyPool), which
// also fail with ErrBookOpened having read nothing: that read is read again too.
func ReadAgainOpened(ctx context.Context, fn func(ctx context.Context) error) error {
	return readAgain(ctx, fn, func(err error) bool { return ReadNothing(err) || errors.Is(err, ErrBookOpened) })
}

func readAgain(ctx context.Context, fn func(ctx context.Context) error, nothing func(error) bool) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := fn(ctx)
		if !nothing(err) || attempt == readRetries {
			return err
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Microsecond)
	}
}

// ReadNothing tells the failures of a reader of a -shm it cannot write that read nothing and pass.
// SQLite's reader of such a -shm fails with SQLITE_READONLY_RECOVERY when it found the WAL index
// header half rewritten by a writer's commit, and with SQLITE_READONLY_CANTINIT when it found no read
// mark it may use just after the writer restarted its WAL and before the writer's own next read set
// one: the read again succeeds, as SQLite's own retry would have it for a reader that may write.
func ReadNothing(err error) bool {
	return errors.Is(err, sqlite3.READONLY_RECOVERY) || errors.Is(err, sqlite3.READONLY_CANTINIT)
}

// readRetries bounds the reads again of a reader that met a writer's commit.
const readRetries = 100

// OpenConn opens one read connection through the driver's own API, outside database/sql's pool, for
// a statement whose life is the connection's, set as OpenReader sets its connections.
func OpenConn(path string, cfg Config, file os.FileInfo) (*sqlite3.Conn, error) {
	q := "mode=ro"
	if cfg.VFS != "" {
		q += "&vfs=" + url.QueryEscape(cfg.VFS)
	}
	u := url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: q}
	// mode=ro in the URI makes the connection read-only, whatever flags OpenContext adds.
	c, err := sqlite3.OpenContext(sqlite3.WithMaxMemory(context.Background(), connMemory), u.String())
	if err != nil {
		return nil, err
	}
	err = c.BusyTimeout(cfg.BusyTimeout)
	if err == nil && file != nil {
		err = isFile(connFile(c), file, path)
	}
	if err == nil {
		err = c.Exec("PRAGMA query_only=1")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
