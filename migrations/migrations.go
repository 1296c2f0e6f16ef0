// SPDX-License-Identifier: Apache-2.0

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
//
// Rolling back can lose what a later version records: how far the relay projected each run
// (version 2), the highest seq of a forgotten run (version 3), and the digests of the projected
// once-keyed lines whose bytes the book no longer keeps (version 6: their keys stay). `outbox migrate down` refuses such
// a step without --force; goose down does not ask. Either way, migrating up again rebuilds every
// position the rows still prove (a forgotten row and a ledger row were projected, and so was every
// line before them), so recovery never meets a hole below a run's position; the lines after it are
// sent to the sink again, which holds them as duplicates, or refuses one whose predecessor it lacks.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/textmachine/outbox/internal/faultpoint"
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

// ErrSchemaMismatch is returned when a database's outbox schema is not one this module can work
// with: its version table names a version newer than the module knows (written by a newer release),
// or a table, column or index the protocol relies on is missing.
var ErrSchemaMismatch = errors.New("outbox: schema mismatch")

// Up applies every pending migration to db, one at a time, each in its own transaction with its
// version row, after checking that the database holds no version newer than the module knows, and
// checks the schema it leaves (see Check).
func Up(ctx context.Context, db *sql.DB) error {
	if err := checkVersions(ctx, db); err != nil {
		return err
	}
	if err := IncrementalIfEmpty(ctx, db); err != nil {
		return err
	}
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	// One at a time: each migration commits with its version row, and a crash between two leaves a
	// database at the first one's version, which the next Up takes on from (the fault point is there).
	for {
		_, err := p.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			break
		}
		if err != nil {
			return fmt.Errorf("migrations: up: %w", err)
		}
		faultpoint.Hit(faultpoint.MigrationStep)
	}
	return Check(ctx, db)
}

// IncrementalIfEmpty puts a database that has no table yet in the mode in which it gives the pages
// its deletes free back to the file system (auto_vacuum=INCREMENTAL; the outbox gives them back in
// bounded steps after each forget). SQLite changes that mode on a database with tables only by
// rewriting it whole with a VACUUM, which is an operator's step (outbox vacuum); on an empty one the
// VACUUM that records it costs nothing. Up calls it before the first migration; a database with a
// table is left alone.
func IncrementalIfEmpty(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer conn.Close()
	var tables int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&tables); err != nil {
		return fmt.Errorf("migrations: read the schema: %w", err)
	}
	if tables > 0 {
		return nil
	}
	for _, stmt := range []string{"PRAGMA auto_vacuum=INCREMENTAL", "VACUUM"} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: %s: %w", stmt, err)
		}
	}
	return nil
}

// Known returns the versions of the embedded migrations, in order.
func Known() []int64 {
	var out []int64
	entries, _ := fs.ReadDir(files, ".")
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// Applied returns the versions the database's version table records as applied, in order; none when
// the table does not exist.
func Applied(ctx context.Context, db *sql.DB) ([]int64, error) {
	var n int
	if err := db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, TableName).Scan(&n); err != nil {
		return nil, fmt.Errorf("migrations: read the version table: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	// goose records each step as a row, and a migration rolled back as a second row with is_applied
	// false; the latest row of a version says whether it stands.
	rows, err := db.QueryContext(ctx, `SELECT version_id FROM `+TableName+` AS v
		WHERE version_id > 0 AND is_applied
		  AND id = (SELECT MAX(id) FROM `+TableName+` WHERE version_id = v.version_id)
		ORDER BY version_id`)
	if err != nil {
		return nil, fmt.Errorf("migrations: read the version table: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("migrations: read the version table: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read the version table: %w", err)
	}
	return out, nil
}

// Unknown returns the applied versions that the module does not know: a newer release migrated the
// database.
func Unknown(ctx context.Context, db *sql.DB) ([]int64, error) {
	applied, err := Applied(ctx, db)
	if err != nil {
		return nil, err
	}
	known := Known()
	var out []int64
	for _, v := range applied {
		if !slices.Contains(known, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

func checkVersions(ctx context.Context, db *sql.DB) error {
	unknown, err := Unknown(ctx, db)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		known := Known()
		return fmt.Errorf("%w: the database is at version %d, which this release does not know (it knows up to %d): open it with the release that migrated it",
			ErrSchemaMismatch, unknown[len(unknown)-1], known[len(known)-1])
	}
	return nil
}

// required is what the protocol relies on in the schema of the latest version: each table with its
// columns, and each index with whether it must be unique and the partial condition that makes it a
// ledger of non-empty keys.
var required = struct {
	tables  map[string][]string
	indexes map[string]string // name -> table; all unique and partial
}{
	tables: map[string][]string{
		"events_outbox":   {"engine_run_id", "seq", "line", "once_key", "announce_key", "enqueued_at", "spill", "digest", "counted"},
		"outbox_progress": {"engine_run_id", "projected", "last_seq"},
		"events_lines":    {"id", "line"},
		"outbox_stops":    {"engine_run_id", "seq", "reason", "stopped_at"},
		"outbox_runs":     {"engine_run_id", "last_seq", "projected", "forgotten", "lines", "ledger_lines", "counted_to", "visit"},
	},
	indexes: map[string]string{
		"events_outbox_once_key":     "events_outbox",
		"events_outbox_announce_key": "events_outbox",
	},
}

// spillTriggers drop a large line with its row (migrations/00003).
var spillTriggers = []string{"events_outbox_spill_delete"}

// Check returns an error wrapping ErrSchemaMismatch when the database holds a version newer than the
// module knows, is not migrated to the latest known version, or lacks a table, column or unique index
// the protocol relies on. It names what is wrong.
func Check(ctx context.Context, db *sql.DB) error {
	if err := checkVersions(ctx, db); err != nil {
		return err
	}
	applied, err := Applied(ctx, db)
	if err != nil {
		return err
	}
	known := Known()
	if latest := known[len(known)-1]; len(applied) == 0 || applied[len(applied)-1] < latest {
		at := int64(0)
		if len(applied) > 0 {
			at = applied[len(applied)-1]
		}
		return fmt.Errorf("%w: the database is at version %d, this release needs %d: migrate it up", ErrSchemaMismatch, at, latest)
	}
	var missing []string
	for table, cols := range required.tables {
		have := map[string]bool{}
		rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			return fmt.Errorf("migrations: read the schema: %w", err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return fmt.Errorf("migrations: read the schema: %w", err)
			}
			have[name] = true
		}
		rows.Close()
		if len(have) == 0 {
			missing = append(missing, "table "+table)
			continue
		}
		for _, c := range cols {
			if !have[c] {
				missing = append(missing, "column "+table+"."+c)
			}
		}
	}
	for index, table := range required.indexes {
		var unique, partial int
		err := db.QueryRowContext(ctx, `SELECT "unique", partial FROM pragma_index_list(?) WHERE name = ?`, table, index).Scan(&unique, &partial)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			missing = append(missing, "unique index "+index)
		case err != nil:
			return fmt.Errorf("migrations: read the schema: %w", err)
		case unique != 1:
			missing = append(missing, "uniqueness of index "+index)
		}
	}
	for _, trigger := range spillTriggers {
		var triggers int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = ?`,
			trigger).Scan(&triggers); err != nil {
			return fmt.Errorf("migrations: read the schema: %w", err)
		}
		if triggers == 0 {
			missing = append(missing, "trigger "+trigger)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%w: missing %s", ErrSchemaMismatch, strings.Join(missing, ", "))
	}
	return nil
}
