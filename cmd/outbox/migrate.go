// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/flock"
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

// migrateWrite applies or rolls back migrations under the book's writer lock.
func migrateWrite(ctx context.Context, path, action string, force bool, stdout io.Writer) error {
	if err := checkFile(path, "database"); err != nil && !(action == "up" && missing(path)) {
		return err
	}
	if !missing(path) {
		// The consumer's database is the other SQLite file beside a book: the outbox's tables added
		// to it make the inbox refuse it as a book, and the consumer could not start again.
		if in, err := inbox.OpenReadOnly(ctx, path); err == nil {
			in.Close()
			return fmt.Errorf("database %s is a consumer's database (it holds an inbox), not a book; nothing was changed", quote(path))
		}
	}
	lock, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := flock.Exclusive(lock); err != nil {
		lock.Close()
		if errors.Is(err, flock.ErrHeld) {
			return &heldError{path, "a running engine",
				fmt.Sprintf("database %s is held by a running engine; stop it first", quote(path))}
		}
		return err
	}
	defer flock.Release(lock)
	// The path taken literally: never pasted into a URI, where "?", "#" or "%41" would mean
	// something else.
	u := url.URL{Scheme: "file", OmitHost: true, Path: path}
	d, err := driver.Open(u.String(), func(c *sqlite3.Conn) error {
		if err := c.BusyTimeout(5 * time.Second); err != nil {
			return err
		}
		return c.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL")
	})
	if err != nil {
		return err
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	err = migrateLocked(ctx, d, action, force, stdout)
	var loss *lossError
	if err != nil && !errors.As(err, &loss) {
		return fmt.Errorf("%s: %w", quote(path), err)
	}
	return err
}

// migrateLocked applies or rolls back migrations on d, whose writer lock is held.
func migrateLocked(ctx context.Context, d *sql.DB, action string, force bool, stdout io.Writer) error {
	p, err := migrations.NewProvider(d)
	if err != nil {
		return err
	}
	// A book migrated by a newer release is not this release's to change, up or down.
	if unknown, err := migrations.Unknown(ctx, d); err != nil || len(unknown) > 0 {
		if err == nil {
			err = fmt.Errorf("%w: the database is at version %d, which this release does not know: use the release that migrated it",
				migrations.ErrSchemaMismatch, unknown[len(unknown)-1])
		}
		return err
	}
	if action == "up" {
		if err := migrations.IncrementalIfEmpty(ctx, d); err != nil {
			return err
		}
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(stdout, "applied %s\n", r.Source.Path)
		}
		if err != nil {
			return err
		}
		if len(res) == 0 {
			v, err := p.GetDBVersion(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "nothing to apply: the database is at version %d, the latest\n", v)
		}
		// Up to date by its version table, but a table, column or index dropped by hand is still
		// missing: say so rather than "nothing to do".
		return migrations.Check(ctx, d)
	}
	if !force {
		if err := checkLoss(ctx, d, p); err != nil {
			return err
		}
	}
	r, err := p.Down(ctx)
	if r != nil && err == nil {
		fmt.Fprintf(stdout, "rolled back %s\n", r.Source.Path)
	}
	return err
}

func missing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist)
}

// lossError is a rollback refused because it would destroy data.
type lossError struct {
	version int64
	what    string
}

func (e *lossError) Error() string {
	return fmt.Sprintf("rolling back version %d would drop %s; nothing was changed (give --force to roll back anyway)", e.version, e.what)
}

// positionsLost counts the runs whose projected position is higher than the one migration 00002's
// up step rebuilds from the rows (its query, kept in step with it), and the stored lines between
// the two, which recovery would send again.
const positionsLost = `WITH shown AS (
	SELECT engine_run_id, MAX(shown) AS projected
	FROM (
		SELECT engine_run_id,
		       CASE WHEN once_key <> '' THEN seq
		            WHEN seq - 1 > COALESCE(LAG(seq) OVER (PARTITION BY engine_run_id ORDER BY seq), 0) THEN seq - 1
		            ELSE 0 END AS shown
		FROM events_outbox
	)
	GROUP BY engine_run_id
)
SELECT count(*), COALESCE(SUM((SELECT count(*) FROM events_outbox AS e
	WHERE e.engine_run_id = p.engine_run_id AND e.seq > COALESCE(s.projected, 0) AND e.seq <= p.projected)), 0)
FROM outbox_progress AS p LEFT JOIN shown AS s ON s.engine_run_id = p.engine_run_id
WHERE p.projected > COALESCE(s.projected, 0)`

// checkLoss refuses rolling back the book's current version when that drops stored events or once
// keys: version 1 drops the table of events and the ledger with it; version 2 drops the once keys of
// lines not yet projected, which would then never reach the ledger, and the positions the relay
// recorded, of which migrating up again rebuilds only what the rows prove; version 3 drops the
// record of how far forgotten runs went; version 4 drops the record of runs whose projection
// stopped on the sink's refusal; version 6 drops the digests of the projected once-keyed lines whose
// bytes the book no longer keeps.
func checkLoss(ctx context.Context, d *sql.DB, p interface {
	GetDBVersion(context.Context) (int64, error)
}) error {
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	count := func(query string) (int64, error) {
		var n int64
		err := d.QueryRowContext(ctx, query).Scan(&n)
		return n, err
	}
	switch v {
	case 1:
		events, err := count(`SELECT count(*) FROM events_outbox`)
		if err != nil {
			return err
		}
		keys, err := count(`SELECT count(*) FROM events_outbox WHERE once_key <> ''`)
		if err != nil {
			return err
		}
		if events > 0 {
			return &lossError{v, fmt.Sprintf("%s, %s", plural(events, "stored event"), ofThem(keys, "a once key in the ledger", "once keys in the ledger"))}
		}
	case 2:
		keys, err := count(`SELECT count(*) FROM events_outbox WHERE announce_key <> '' AND once_key = ''`)
		if err != nil {
			return err
		}
		var lost []string
		if keys > 0 {
			lost = append(lost, fmt.Sprintf("the once keys of %s not yet projected", plural(keys, "event")))
		}
		var runs, resent int64
		if err := d.QueryRowContext(ctx, positionsLost).Scan(&runs, &resent); err != nil {
			return err
		}
		if runs > 0 {
			lost = append(lost, fmt.Sprintf("the projected positions of %s, beyond what their rows show: "+
				"%s the sink has would be sent to it again, and a run whose last lines were "+
				"forgotten could give their seqs again", plural(runs, "run"), plural(resent, "stored line")))
		}
		if len(lost) > 0 {
			return &lossError{v, strings.Join(lost, ", and ")}
		}
	case 3:
		// Without last_seq, a run whose rows were forgotten starts again below its highest seq.
		runs, err := count(`SELECT count(*) FROM outbox_progress AS p WHERE last_seq >
			(SELECT COALESCE(MAX(seq), 0) FROM events_outbox AS e WHERE e.engine_run_id = p.engine_run_id)`)
		if err != nil {
			return err
		}
		if runs > 0 {
			return &lossError{v, fmt.Sprintf("the highest seq of %s whose lines were forgotten, so their next events would reuse numbers", plural(runs, "run"))}
		}
	case 4:
		runs, err := count(`SELECT count(*) FROM outbox_stops`)
		if err != nil {
			return err
		}
		if runs > 0 {
			return &lossError{v, fmt.Sprintf("the record of %s whose projection stopped on the sink's refusal", plural(runs, "run"))}
		}
	case 6:
		// The lines are in the journal only; the down step keeps their keys and drops their digests.
		lines, err := count(`SELECT count(*) FROM events_outbox WHERE once_key <> '' AND length(digest) > 0`)
		if err != nil {
			return err
		}
		if lines > 0 {
			return &lossError{v, fmt.Sprintf("the digests of %s whose bytes the book no longer keeps (their once keys stay): "+
				"an older release's outbox check reports each as differing from the journal", plural(lines, "projected once-keyed line"))}
		}
	}
	return nil
}
