// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/inbox"
	imigrations "github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	inboxCommands["migrate"] = runInboxMigrate
}

const inboxMigrateAbout = `
The inbox's migrations in a consumer's database, as outbox migrate does for a book: up applies
every pending one, creating the file if it is missing; down rolls back the latest one; status
lists every migration, applied or pending, and any version the database records that this outbox
does not know; version prints the inbox's current version; sql --version N prints migration N's
SQL (its rollback with --down), for a team that applies migrations with a tool of its own.

The version table is ` + imigrations.TableName + `, the one the inbox and the goose CLI (-table) use.
up and down take the inbox's lock, so they refuse to run beside a running consumer; up beside one
with nothing to apply says "nothing to apply" and succeeds, as goose does. down refuses a
step that would drop the inbox's state (the runs' high-water marks, quarantines, accepted gaps,
source positions, digests), saying how many rows, unless --force is given: a consumer whose state
is dropped applies every line again as new. Rolling back version 2 drops nothing; rolling back
version 3 drops the positions rewound sources were rewound from (refused while there are any,
unless --force); rolling back version 4 drops the counts of lines applied, duplicate, stale and
quarantined (outbox_inbox_lines_*_total), which exporters then see as counters reset. Every action
refuses a book and what is not a SQLite database, and creates nothing. status and version only
read: they write nothing and create no file beside the database.`

func runInboxMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runMigrations(ctx, args, stdout, stderr, migrationsCommand{
		name: "inbox migrate", about: inboxMigrateAbout, dbUsage: "the consumer's database `file`",
		forceUsage: "with down: roll back even a step that drops the inbox's state",
		read:       inboxMigrateRead, write: inboxMigrateWrite,
		table: imigrations.TableName, fsys: imigrations.FS,
	})
}

// inboxMigrateRead reports the inbox's migrations through a read-only connection, which writes
// nothing and creates no file beside the database.
func inboxMigrateRead(ctx context.Context, path, action string, stdout io.Writer) error {
	if err := checkFile(path, "database"); err != nil {
		return err
	}
	d, err := outbox.OpenReadOnlyDB(ctx, path)
	if err != nil {
		return inboxMigrateError(path, err)
	}
	defer d.Close()
	var applied map[int64]string
	read := func() error {
		if err := refuseBook(ctx, d, path); err != nil {
			return err
		}
		applied, err = appliedVersions(ctx, d, imigrations.TableName)
		return err
	}
	if err := readAgain(read); err != nil {
		return inboxMigrateError(path, err)
	}
	return reportMigrations(stdout, action, applied, imigrations.FS())
}

func refuseBook(ctx context.Context, d *sql.DB, path string) error {
	var n int
	if err := d.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table'
		AND name IN ('events_outbox', 'outbox_progress', 'outbox_db_version')`).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: %s is a book", inbox.ErrOutboxDatabase, path)
	}
	return nil
}

// inboxMigrateError says in the operator's terms why the database was refused.
func inboxMigrateError(path string, err error) error {
	switch {
	case errors.Is(err, inbox.ErrLocked):
		return fmt.Errorf("%s is open by a running consumer (it holds the inbox's lock): stop it first; nothing changed", quote(path))
	case errors.Is(err, inbox.ErrOutboxDatabase):
		return fmt.Errorf("database %s: it is a book, not a consumer's database; nothing changed", quote(path))
	case errors.Is(err, inbox.ErrNotDatabase), errors.Is(err, sqlite3.NOTADB):
		return fmt.Errorf("%s is not a SQLite database; nothing changed", quote(path))
	case errors.Is(err, inbox.ErrHardLinked):
		return fmt.Errorf("database %s has more than one name; keep one: nothing changed", quote(path))
	}
	return err
}

// inboxMigrateWrite applies or rolls back the inbox's migrations under the inbox's lock.
func inboxMigrateWrite(ctx context.Context, path, action string, force bool, stdout io.Writer) error {
	if err := checkFile(path, "database"); err != nil && !(action == "up" && missing(path)) {
		return err
	}
	err := inbox.RunLocked(ctx, path, func(ctx context.Context, d *sql.DB) error {
		return inboxMigrateLocked(ctx, d, action, force, stdout)
	})
	var loss *lossError
	if errors.Is(err, inbox.ErrLocked) {
		return &heldError{path, "a running consumer", inboxMigrateError(path, err).Error()}
	}
	if err != nil && !errors.As(err, &loss) {
		return inboxMigrateError(path, err)
	}
	return err
}

// inboxMigrateLocked applies or rolls back the inbox's migrations on d, whose lock is held.
func inboxMigrateLocked(ctx context.Context, d *sql.DB, action string, force bool, stdout io.Writer) error {
	applied, err := appliedVersions(ctx, d, imigrations.TableName)
	if err != nil {
		return err
	}
	var v int64
	for version := range applied {
		v = max(v, version)
	}
	// A database migrated by a newer release is not this release's to change, up or down.
	if latest := imigrations.Latest(); v > latest {
		return fmt.Errorf("%w: the database is at version %d, this release knows up to %d: use the release that migrated it",
			imigrations.ErrSchemaMismatch, v, latest)
	}
	p, err := imigrations.NewProvider(d)
	if err != nil {
		return err
	}
	if action == "up" {
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(stdout, "applied %s\n", r.Source.Path)
		}
		if err == nil && len(res) == 0 {
			v, err := p.GetDBVersion(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "nothing to apply: the database is at version %d, the latest\n", v)
		}
		return err
	}
	if v == 0 {
		// Asked of goose, this would create the version table in a database that has none.
		fmt.Fprintln(stdout, "no migration to roll back")
		return nil
	}
	if !force {
		if err := checkInboxLoss(ctx, d, v); err != nil {
			return err
		}
	}
	r, err := p.Down(ctx)
	if r != nil && err == nil {
		fmt.Fprintf(stdout, "rolled back %s\n", r.Source.Path)
	}
	return err
}

// checkInboxLoss refuses rolling back version 1, which drops every table of the inbox, while they
// hold a row: without them the consumer would apply every line again as new. Version 2 only gives
// the digests their first shape back, a row per digest, and drops nothing. Version 3 drops the
// position a rewound source was rewound from, which it still needs to read a rotated file it had
// not finished, or as the floor of a stream's retention-gap check. Version 4 drops the counts, which
// exporters see as a counter reset, as after any restart of a counter: nothing is applied again.
func checkInboxLoss(ctx context.Context, d *sql.DB, v int64) error {
	if v == 3 {
		var n int64
		if err := d.QueryRowContext(ctx, `SELECT count(*) FROM inbox_sources WHERE rewound = 1`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		what := "the position 1 rewound source was rewound from"
		if n > 1 {
			what = fmt.Sprintf("the positions %d rewound sources were rewound from", n)
		}
		return &lossError{v, what + ", so a file source would not finish a rotated file it had not read to its end, " +
			"nor a stream source report a retention gap after it"}
	}
	if v != 1 {
		return nil
	}
	var lost []string
	for _, t := range []struct{ table, one, many string }{
		{"inbox_runs", "the high-water mark of 1 run", "the high-water marks of %d runs"},
		{"inbox_quarantine", "1 quarantine", "%d quarantines"},
		{"inbox_gaps_accepted", "the record of 1 accepted gap", "the record of %d accepted gaps"},
		{"inbox_sources", "the position of 1 source", "the positions of %d sources"},
		{"inbox_digests", "1 digest", "%d digests"},
	} {
		var n int64
		if err := d.QueryRowContext(ctx, `SELECT count(*) FROM `+t.table).Scan(&n); err != nil {
			return err
		}
		switch {
		case n == 1:
			lost = append(lost, t.one)
		case n > 1:
			lost = append(lost, fmt.Sprintf(t.many, n))
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return &lossError{v, strings.Join(lost, ", ") + ", so the consumer would apply every line again as new"}
}
