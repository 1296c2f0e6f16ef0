// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// readAgain runs read until it has not met a commit it could not wait out: a reader beside an
// engine or a consumer whose -shm this user cannot write may meet one mid-way (SQLITE_READONLY_RECOVERY,
// or CANTINIT just after a WAL restart) having read nothing, and the same read again succeeds.
func readAgain(read func() error) error {
	err := read()
	for i := 0; i < 100 && (errors.Is(err, sqlite3.READONLY_RECOVERY) || errors.Is(err, sqlite3.READONLY_CANTINIT)); i++ {
		err = read()
	}
	return err
}

// reportMigrations prints what action asks of the applied versions: the highest (version), or each
// migration of fsys applied or pending and the applied ones this release does not know (status).
func reportMigrations(stdout io.Writer, action string, applied map[int64]string, fsys fs.FS) error {
	if action == "version" {
		var v int64
		for version := range applied {
			v = max(v, version)
		}
		fmt.Fprintln(stdout, v)
		return nil
	}
	known, err := knownMigrations(fsys)
	if err != nil {
		return err
	}
	printMigrations(stdout, known, applied, "this outbox")
	return nil
}

// migrateRead reports the book's migrations through a read-only connection.
func migrateRead(ctx context.Context, path, action string, stdout io.Writer) error {
	if err := checkFile(path, "database"); err != nil {
		return err
	}
	// A consumer's database has none of the book's migrations: reported as a book with all of them
	// pending, it would send the operator to migrate up, which refuses it.
	if in, err := inbox.OpenReadOnly(ctx, path); err == nil {
		in.Close()
		return fmt.Errorf("database %s is a consumer's database (it holds an inbox), not a book; see outbox inbox migrate", quote(path))
	}
	d, err := outbox.OpenReadOnlyDB(ctx, path)
	if err != nil {
		return err
	}
	defer d.Close()
	var applied map[int64]string
	if err := readAgain(func() (err error) {
		applied, err = appliedVersions(ctx, d, migrations.TableName)
		return err
	}); err != nil {
		return err
	}
	return reportMigrations(stdout, action, applied, migrations.FS())
}

// printMigrations lists each known migration, applied or pending, then the applied versions that
// release (e.g. "this outbox") does not know.
func printMigrations(stdout io.Writer, known []migration, applied map[int64]string, release string) {
	for _, m := range known {
		state := "pending"
		if at, ok := applied[m.version]; ok {
			state = "applied " + at
		}
		fmt.Fprintf(stdout, "%-40s %s\n", m.name, state)
	}
	var unknown []int64
	for v := range applied {
		if !slices.ContainsFunc(known, func(m migration) bool { return m.version == v }) {
			unknown = append(unknown, v)
		}
	}
	slices.Sort(unknown)
	for _, v := range unknown {
		fmt.Fprintf(stdout, "%-40s applied %s\n", fmt.Sprintf("%05d (unknown to %s)", v, release), applied[v])
	}
}

// appliedVersions reads the version table as goose keeps it: a row per applied version (and the
// version 0 row goose writes when it creates the table). A database without the table has none.
func appliedVersions(ctx context.Context, d *sql.DB, table string) (map[int64]string, error) {
	var n int
	err := d.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&n)
	if err != nil || n == 0 {
		return map[int64]string{}, err
	}
	// The latest row of a version says whether it stands (see migrations.Applied).
	rows, err := d.QueryContext(ctx, `SELECT version_id, tstamp FROM `+table+` AS v
		WHERE version_id > 0 AND is_applied
		  AND id = (SELECT MAX(id) FROM `+table+` WHERE version_id = v.version_id)`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var v int64
		var at any
		if err := rows.Scan(&v, &at); err != nil {
			return nil, err
		}
		out[v] = formatStamp(at)
	}
	return out, rows.Err()
}

func formatStamp(at any) string {
	switch t := at.(type) {
	case time.Time:
		return t.UTC().Format("2006-01-02 15:04:05Z")
	case string:
		return sanitize(t)
	}
	return "(no time)"
}

type migration struct {
	version int64
	name    string
}

// knownMigrations lists the migrations embedded in fsys, by version.
func knownMigrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if ok && err == nil && strings.HasSuffix(e.Name(), ".sql") {
			out = append(out, migration{version: v, name: e.Name()})
		}
	}
	return out, nil
}
