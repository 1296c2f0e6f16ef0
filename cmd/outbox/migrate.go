// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["migrate"] = command{
		summary: "apply, roll back, report or print the schema migrations (up|down|status|version|sql)",
		run:     runMigrate,
	}
}

const migrateAbout = `
up applies every pending migration, creating the file if it is missing; down rolls back the
latest one; status lists every migration, applied or pending, and any version the book records
that this outbox does not know; version prints the book's current version; sql --version N
prints migration N's SQL (its rollback with --down), for a team that applies migrations with a
tool of its own, and needs no --db.

The version table is ` + migrations.TableName + `, the one the library and the goose CLI (-table) use.
up and down take the book's writer lock, so they refuse to run beside an engine; up beside an
engine with nothing to apply (the book at the latest version) says "nothing to apply" and
succeeds, as goose does. down refuses a
step that would drop stored events or once keys, or the record of how far the sink has each run,
saying how many, unless --force is given. A book rolled back with --force and migrated up again
can still be recovered (outbox relay): up rebuilds every position the rows prove, and the lines
after it are sent to the sink again, which skips the copies it holds as duplicates.
status and version only read: they write nothing and create no file beside the database.`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runMigrations(ctx, args, stdout, stderr, migrationsCommand{
		name: "migrate", about: migrateAbout, dbUsage: "the database `file`",
		forceUsage: "with down: roll back even a step that drops stored events, once keys or positions",
		read:       migrateRead, write: migrateWrite,
		table: migrations.TableName, fsys: migrations.FS,
	})
}

// migrationsCommand is one of the two migrate commands, the book's and the inbox's, which share
// their actions, flags and refusals and differ in what they migrate.
type migrationsCommand struct {
	name                string // after "outbox "
	about               string
	dbUsage, forceUsage string
	read                func(ctx context.Context, path, action string, stdout io.Writer) error
	write               func(ctx context.Context, path, action string, force bool, stdout io.Writer) error
	table               string       // the goose version table
	fsys                func() fs.FS // the embedded migrations
}

func runMigrations(ctx context.Context, args []string, stdout, stderr io.Writer, c migrationsCommand) int {
	fs := newFlags(c.name, "outbox "+c.name+" up|down|status|version --db FILE [--force]\n       outbox "+c.name+" sql --version N [--down]", c.about)
	dbPath := fs.String("db", "", c.dbUsage)
	force := fs.Bool("force", false, c.forceUsage)
	version := fs.Int64("version", 0, "with sql: the migration `N` whose SQL to print")
	down := fs.Bool("down", false, "with sql: print the migration's rollback instead of its up step")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) == 1 && pos[0] == "sql" {
		if *dbPath != "" || *force {
			return usageError(stderr, "outbox "+c.name, "sql takes --version N and --down, and reads no database")
		}
		if err := printMigrationSQL(stdout, c.fsys(), c.table, *version, *down); err != nil {
			return failErr(stderr, exitUsage, c.name+" sql", err)
		}
		return exitOK
	}
	if len(pos) != 1 || *dbPath == "" {
		return usageError(stderr, "outbox "+c.name, "need an action (up, down, status, version or sql) and --db FILE")
	}
	action := pos[0]
	if *version != 0 || *down {
		return usageError(stderr, "outbox "+c.name, "--version and --down go with sql")
	}
	var err error
	switch action {
	case "status", "version":
		err = c.read(ctx, *dbPath, action, stdout)
	case "up", "down":
		err = c.write(ctx, *dbPath, action, *force, stdout)
		var held *heldError
		if action == "up" && errors.As(err, &held) {
			// Beside a running engine (or consumer), up with nothing to apply has nothing to wait
			// for: goose says so and succeeds, and a deploy script that migrates before each start
			// must not fail because the previous process is still draining.
			if v, ok := upToDate(ctx, *dbPath, c); ok {
				fmt.Fprintf(stdout, "nothing to apply: the database is at version %d, the latest (%s has it open; nothing was changed)\n", v, held.holder)
				return exitOK
			}
		}
	default:
		return usageError(stderr, "outbox "+c.name, "unknown action %s (up, down, status, version or sql)", quote(action))
	}
	var refused *lossError
	if errors.As(err, &refused) {
		fmt.Fprintf(stderr, "outbox %s down: %s\n", c.name, sanitize(refused.Error()))
		return exitUsage
	}
	if err != nil {
		return failErr(stderr, exitUsage, c.name+" "+action, err)
	}
	return exitOK
}

// heldError is up or down refused because a running process holds the database's lock.
type heldError struct {
	path   string
	holder string // "a running engine", "a running consumer"
	msg    string
}

func (e *heldError) Error() string { return e.msg }

// upToDate reports, reading through a read-only connection, whether every migration this release
// knows is applied and no other: then up has nothing to do.
func upToDate(ctx context.Context, path string, c migrationsCommand) (int64, bool) {
	d, err := outbox.OpenReadOnlyDB(ctx, path)
	if err != nil {
		return 0, false
	}
	defer d.Close()
	var applied map[int64]string
	if err := readAgain(func() (err error) {
		applied, err = appliedVersions(ctx, d, c.table)
		return err
	}); err != nil {
		return 0, false
	}
	known, err := knownMigrations(c.fsys())
	if err != nil || len(known) != len(applied) {
		return 0, false
	}
	for _, m := range known {
		if _, ok := applied[m.version]; !ok {
			return 0, false
		}
	}
	return known[len(known)-1].version, true
}
