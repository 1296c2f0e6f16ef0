package outbox

import (
	"context"
	"database/sql"
	"errors"
)

// prepared runs one of sqlc's generated calls on a statement prepared from the same SQL, so that the
// hot paths keep a statement prepared once on the writer connection and still bind their arguments
// through the generated code, from its …Params struct: a reordered query then changes the generated
// binding with it, instead of writing a value into another column. Any other query is refused.
type prepared struct {
	sql  string
	stmt *sql.Stmt
}

var errOtherQuery = errors.New("outbox: a prepared statement was given another query")

func (p prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if query != p.sql {
		return nil, errOtherQuery
	}
	return p.stmt.ExecContext(ctx, args...)
}

func (p prepared) PrepareContext(context.Context, string) (*sql.Stmt, error) {
	return nil, errOtherQuery
}

func (p prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if query != p.sql {
		return nil, errOtherQuery
	}
	return p.stmt.QueryContext(ctx, args...)
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if query != p.sql {
		// A *sql.Row cannot carry an error of its own making, and this is a mistake in the
		// package's own code, which its tests run.
		panic(errOtherQuery)
	}
	return p.stmt.QueryRowContext(ctx, args...)
}
