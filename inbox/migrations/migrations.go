// SPDX-License-Identifier: Apache-2.0

// Package migrations holds the goose migrations that create and evolve the inbox's tables in a
// consumer's database.
//
// The inbox package runs them when an Inbox is opened; an operator runs them at deploy time with
// `outbox inbox migrate up --db ./consumer.db`, which takes the inbox's lock (it refuses beside a
// running consumer) and guards a down step that would drop state, or with the goose CLI, which does
// neither, naming the inbox's own version table:
//
//	goose -dir inbox/migrations -table inbox_db_version sqlite3 ./consumer.db up
//
// The version table is the inbox's own ([TableName]), never goose's default nor the outbox's, so the
// consumer's own migrations and the inbox's cannot mistake each other's history.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/pressly/goose/v3"
)

// TableName is the goose version table of the inbox schema.
const TableName = "inbox_db_version"

//go:embed *.sql
var files embed.FS

// FS returns the migration files, at the root of the returned file system as goose expects.
func FS() fs.FS { return files }

// ErrSchemaMismatch is returned when the database's inbox schema is newer than this release knows.
var ErrSchemaMismatch = errors.New("inbox: schema mismatch")

// NewProvider returns a goose provider for the inbox migrations on db. It never uses goose's global
// registry, so migrations the host program registered in Go are not picked up.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	opts = append([]goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(TableName),
	}, opts...)
	p, err := goose.NewProvider(goose.DialectSQLite3, db, files, opts...)
	if err != nil {
		return nil, fmt.Errorf("inbox migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to db, after checking that the database holds no version newer
// than this release knows.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("inbox migrations: read the version: %w", err)
	}
	if latest := Latest(); current > latest {
		return fmt.Errorf("%w: the database is at version %d, this release knows up to %d: open it with the release that migrated it",
			ErrSchemaMismatch, current, latest)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("inbox migrations: up: %w", err)
	}
	return nil
}

// Latest returns the version of the newest embedded migration.
func Latest() int64 {
	var out []int64
	entries, _ := fs.ReadDir(files, ".")
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil {
			out = append(out, v)
		}
	}
	return slices.Max(out)
}
