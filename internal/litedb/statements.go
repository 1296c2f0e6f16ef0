// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Statements are the statements a writer runs on every call, prepared once on its connection. They
// still run through sqlc's generated calls (see On), which bind the arguments from each query's
// ...Params struct, so the argument order is the generated code's, never spelled by hand.
type Statements struct {
	sql   []string
	stmts []*sql.Stmt
}

// Prepare prepares each of queries on db; the i-th is Statements' i-th.
func Prepare(ctx context.Context, db *sql.DB, queries []string) (*Statements, error) {
	st := &Statements{sql: queries, stmts: make([]*sql.Stmt, len(queries))}
	for i, q := range queries {
		stmt, err := db.PrepareContext(ctx, q)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("prepare: %w", err)
		}
		st.stmts[i] = stmt
	}
	return st, nil
}

// Close closes the statements.
func (st *Statements) Close() {
	for _, s := range st.stmts {
		if s != nil {
			s.Close()
		}
	}
}

// On returns the i-th statement bound to tx, binding it into p at its first use in the transaction.
// A transaction keeps one Prepared per statement, so that each is bound once.
func (st *Statements) On(ctx context.Context, tx *sql.Tx, p *Prepared, i int) *Prepared {
	if p.stmt == nil {
		*p = Prepared{st.sql[i], tx.StmtContext(ctx, st.stmts[i])}
	}
	return p
}

// Prepared runs a generated call (a sqlc DBTX) on the statement prepared from the same SQL, bound to
// the call's transaction. Another query is a mistake of the caller's, which its tests run.
type Prepared struct {
	sql  string
	stmt *sql.Stmt
}

// ErrOtherQuery is the error of a Prepared given another query than its own.
var ErrOtherQuery = errors.New("a prepared statement was given another query")

func (p *Prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if query != p.sql {
		return nil, ErrOtherQuery
	}
	return p.stmt.ExecContext(ctx, args...)
}

func (p *Prepared) PrepareContext(context.Context, string) (*sql.Stmt, error) {
	return nil, ErrOtherQuery
}

func (p *Prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if query != p.sql {
		return nil, ErrOtherQuery
	}
	return p.stmt.QueryContext(ctx, args...)
}

func (p *Prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if query != p.sql {
		panic(ErrOtherQuery)
	}
	return p.stmt.QueryRowContext(ctx, args...)
}
