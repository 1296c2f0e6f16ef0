// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"database/sql"
	"sync/atomic"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"
)

// Writer is the one writer connection (see OpenWriter) as its owner keeps it: the driver's
// connection, to ask SQLite whether a transaction is still open; the guard that lets only the owner
// commit on it; and the Holder that refuses a call from inside its transactions.
//
// Its transactions follow one rule. The caller's context bounds the wait for the writer and every
// statement, never the transaction itself: database/sql rolls a transaction back and closes its
// connection when the transaction's context ends mid-way, and this is the owner's one connection. So
// a transaction is begun without cancellation (Begin), the context is checked between steps and
// before COMMIT, and COMMIT itself is never interrupted: once begun, the call's outcome is the
// commit's.
type Writer struct {
	Holder
	// Raw is the writer connection as the driver has it; nil until Attach.
	Raw        *sqlite3.Conn
	committing atomic.Bool
}

// Attach takes the driver's connection out of db, a pool of one connection that is never replaced,
// and from then on turns every commit on it but Commit's into a rollback: the caller's code given a
// transaction could otherwise commit part of it, by calling tx.Commit itself, or by going on after
// one of its statements was interrupted, when SQLite has rolled the transaction back and each later
// statement commits on its own. also, when not nil, runs on the connection.
func (w *Writer) Attach(ctx context.Context, db *sql.DB, also func(*sqlite3.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c := dc.(driver.Conn).Raw()
		w.Raw = c
		c.CommitHook(w.committing.Load)
		if also != nil {
			return also(c)
		}
		return nil
	})
}

// Begin begins a write transaction on conn, the writer connection, without the caller's cancellation
// (see Writer).
func Begin(ctx context.Context, conn *sql.Conn) (*sql.Tx, error) {
	return conn.BeginTx(context.WithoutCancel(ctx), nil)
}

// Commit runs commit, the owner's COMMIT, letting it through.
func (w *Writer) Commit(commit func() error) error {
	w.committing.Store(true)
	defer w.committing.Store(false)
	return commit()
}

// Lost reports a transaction that SQLite has already ended: an interrupted write statement (or a full
// disk, or an I/O error) rolls the whole transaction back, after which every statement would commit
// on its own; so does the caller's code that committed or rolled it back. Checked before anything
// more is written or committed in it.
func (w *Writer) Lost() bool { return w.Raw != nil && w.Raw.GetAutocommit() }
