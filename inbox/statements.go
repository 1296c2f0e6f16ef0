// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/textmachine/outbox/inbox/db"
)

// The statements a call of Apply runs per line or per run, prepared once on the writer connection.
// They still run through sqlc's generated calls (see txn.on), which bind the arguments from each
// query's ...Params struct, so the argument order is the generated code's, never spelled by hand.
type stmtID int

const (
	stmtRunState stmtID = iota
	stmtRunSet
	stmtDigestGet
	stmtDigestsAppend
	stmtDigestsDrop
	stmtRunsUntrimmed
	stmtSourceGet
	stmtSourceSet
	stmtCountersAdd
	numStmts
)

var stmtSQL = [numStmts]string{
	stmtRunState:      db.RunState,
	stmtRunSet:        db.RunSet,
	stmtDigestGet:     db.DigestGet,
	stmtDigestsAppend: db.DigestsAppend,
	stmtDigestsDrop:   db.DigestsDropBelow,
	stmtRunsUntrimmed: db.RunsUntrimmed,
	stmtSourceGet:     db.SourceGet,
	stmtSourceSet:     db.SourceSet,
	stmtCountersAdd:   db.CountersAdd,
}

type statements [numStmts]*sql.Stmt

func prepareStatements(ctx context.Context, w *sql.DB) (*statements, error) {
	st := &statements{}
	for id, query := range stmtSQL {
		stmt, err := w.PrepareContext(ctx, query)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("prepare: %w", err)
		}
		st[id] = stmt
	}
	return st, nil
}

func (st *statements) close() {
	for _, s := range st {
		if s != nil {
			s.Close()
		}
	}
}

// prepared is a db.DBTX that runs a generated call on the statement prepared from the same SQL, bound
// to the call's transaction. Another query is a mistake in this package, which its tests run.
type prepared struct {
	sql  string
	stmt *sql.Stmt
}

var errOtherQuery = errors.New("inbox: a prepared statement was given another query")

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if query != p.sql {
		return nil, errOtherQuery
	}
	return p.stmt.ExecContext(ctx, args...)
}

func (p *prepared) PrepareContext(context.Context, string) (*sql.Stmt, error) {
	return nil, errOtherQuery
}

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if query != p.sql {
		return nil, errOtherQuery
	}
	return p.stmt.QueryContext(ctx, args...)
}

func (p *prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if query != p.sql {
		panic(errOtherQuery)
	}
	return p.stmt.QueryRowContext(ctx, args...)
}
