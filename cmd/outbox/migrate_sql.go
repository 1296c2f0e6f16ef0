// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// printMigrationSQL prints the up step (or with down, the rollback) of migration version, as the
// file holds it without goose's annotations, under a header that names it and says how goose
// records it, so that the library and the outbox command see it applied.
func printMigrationSQL(stdout io.Writer, fsys fs.FS, table string, version int64, down bool) error {
	known, err := knownMigrations(fsys)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(known, func(m migration) bool { return m.version == version })
	if i < 0 {
		vs := make([]string, len(known))
		for j, m := range known {
			vs[j] = strconv.FormatInt(m.version, 10)
		}
		return fmt.Errorf("no migration %d: this release has %s (give --version N)", version, strings.Join(vs, ", "))
	}
	src, err := fs.ReadFile(fsys, known[i].name)
	if err != nil {
		return err
	}
	var up, dn, cur *strings.Builder = &strings.Builder{}, &strings.Builder{}, nil
	noTx := false
	for _, l := range strings.SplitAfter(string(src), "\n") {
		annotation, ok := strings.CutPrefix(strings.TrimSpace(l), "-- +goose ")
		switch {
		case ok && annotation == "Up":
			cur = up
		case ok && annotation == "Down":
			cur = dn
		case ok && annotation == "NO TRANSACTION":
			noTx = true
		case ok:
			// StatementBegin and StatementEnd only tell goose where a statement with inner
			// semicolons (a trigger's body) ends.
		case cur != nil:
			cur.WriteString(l)
		}
	}
	step, body, applied := "up", up.String(), 1
	if down {
		step, body, applied = "down", dn.String(), 0
	}
	fmt.Fprintf(stdout, "-- %s, %s step (version %d).\n", known[i].name, step, version)
	if noTx {
		fmt.Fprintln(stdout, "-- Run it outside a transaction.")
	} else {
		fmt.Fprintln(stdout, "-- Run it in one transaction.")
	}
	fmt.Fprintf(stdout, "-- Goose, the library's Open and the outbox command read what is applied from %s:\n", table)
	fmt.Fprintf(stdout, "-- record the step there as goose does, in the table as goose creates it, so that they see it:\n")
	fmt.Fprintf(stdout, "--   CREATE TABLE IF NOT EXISTS %s (id INTEGER PRIMARY KEY AUTOINCREMENT, version_id INTEGER NOT NULL, "+
		"is_applied INTEGER NOT NULL, tstamp TIMESTAMP DEFAULT (datetime('now')));\n", table)
	// Goose's SQLite dialect tells an existing table by its version 0 row, which it writes when it
	// creates the table: without it, goose would create the table again and fail.
	fmt.Fprintf(stdout, "--   INSERT INTO %s (version_id, is_applied) SELECT 0, 1 WHERE NOT EXISTS (SELECT 1 FROM %s WHERE version_id = 0);\n", table, table)
	fmt.Fprintf(stdout, "--   INSERT INTO %s (version_id, is_applied) VALUES (%d, %d);\n\n", table, version, applied)
	fmt.Fprint(stdout, strings.TrimLeft(body, "\n"))
	return nil
}
