// Package migrations holds the goose migrations that create and evolve the outbox schema.
//
// The same files serve three callers: the outbox package runs them when a store is opened, an engine
// that owns its *sql.DB runs them with [Up], and an operator runs them at deploy time with the goose
// CLI, naming the same version table:
//
//	goose -dir migrations -table outbox_db_version sqlite3 ./book.db up
//
// The version table is the module's own ([TableName]), never goose's default, so the outbox's
// migrations and the host program's cannot mistake each other's history.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// TableName is the goose version table of the outbox schema.
const TableName = "outbox_db_version"

//go:embed *.sql
var files embed.FS

// FS returns the migration files, at the root of the returned file system as goose expects.
func FS() fs.FS { return files }

// NewProvider returns a goose provider for the outbox migrations on db. It never uses goose's global
// registry, so migrations that the host program registered in Go are not picked up.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	opts = append([]goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(TableName),
	}, opts...)
	p, err := goose.NewProvider(goose.DialectSQLite3, db, files, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to db.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}
