// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"

	"github.com/textmachine/outbox/internal/litedb"
)

// ErrBookOpened is returned by a read of a read-only Store that began while no writer had the book
// open and met one that opened it meanwhile. Nothing read is returned; the same read again goes
// through the writer's WAL and succeeds. A read-only inbox's reads return the same error.
var ErrBookOpened = litedb.ErrBookOpened

// OpenReadOnlyDB opens the SQLite database at path for reading through database/sql, the way a
// Store from OpenReadOnly reads it: it writes nothing and creates no file beside the database, works
// where the caller cannot write, and sees what a running writer has committed; a read that meets a
// writer opening a closed book fails with ErrBookOpened. Where the caller cannot write a running
// writer's -shm, a read that meets the writer's commit may fail with sqlite3.READONLY_RECOVERY,
// having read nothing: read again (a read-only Store does so itself). It refuses a path that is not
// a regular file. It checks that path is a database, and nothing of its schema, so it serves tools
// that inspect a book of any version. Every operation takes a connection of its own; close the
// *sql.DB when done.
func OpenReadOnlyDB(ctx context.Context, path string, opts ...Option) (*sql.DB, error) {
	s, err := newStore(path, opts)
	if err != nil {
		return nil, err
	}
	r, err := litedb.OpenReadOnly(ctx, path, s.dbConfig())
	return r, mapErr(ctx, err)
}
