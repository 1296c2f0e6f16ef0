package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/migrations"
)

func init() {
	commands["migrate"] = command{
		summary: "apply, roll back or report the schema migrations (up|down|status|version)",
		run:     runMigrate,
	}
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox migrate", flag.ContinueOnError)
	dbPath := fs.String("db", "", "the database `file`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: outbox migrate up|down|status|version --db FILE\n\n"+
			"up applies every pending migration (creating the file if missing); down rolls back the\n"+
			"latest one; status lists them; version prints the current version. The version table is\n"+
			migrations.TableName+", the one the library and the goose CLI (-table) use. Stop the engine\n"+
			"before going down.\n\nflags:")
		fs.PrintDefaults()
	}
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 1 || *dbPath == "" {
		return usageError(stderr, "outbox migrate", "need an action (up, down, status or version) and --db FILE")
	}
	action := pos[0]
	switch action {
	case "up", "down", "status", "version":
	default:
		return fail(stderr, exitUsage, "migrate: unknown action %q (up, down, status or version)", action)
	}
	if action != "up" {
		if _, err := os.Stat(*dbPath); err != nil {
			return fail(stderr, exitUsage, "migrate %s: %v", action, err)
		}
	}
	d, err := driver.Open("file:"+*dbPath, func(c *sqlite3.Conn) error {
		if err := c.BusyTimeout(5e9); err != nil {
			return err
		}
		return c.Exec("PRAGMA synchronous=FULL")
	})
	if err != nil {
		return fail(stderr, exitUsage, "migrate: %v", err)
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	if err := migrate(ctx, d, action, stdout); err != nil {
		return fail(stderr, exitUsage, "migrate %s %s: %v", action, *dbPath, err)
	}
	return exitOK
}

func migrate(ctx context.Context, d *sql.DB, action string, stdout io.Writer) error {
	p, err := migrations.NewProvider(d)
	if err != nil {
		return err
	}
	switch action {
	case "up":
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(stdout, "applied %s\n", r.Source.Path)
		}
		if err == nil && len(res) == 0 {
			fmt.Fprintln(stdout, "no pending migrations")
		}
		return err
	case "down":
		r, err := p.Down(ctx)
		if r != nil {
			fmt.Fprintf(stdout, "rolled back %s\n", r.Source.Path)
		}
		return err
	case "status":
		st, err := p.Status(ctx)
		for _, s := range st {
			applied := "pending"
			if s.State == "applied" {
				applied = "applied " + s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
			}
			fmt.Fprintf(stdout, "%-40s %s\n", s.Source.Path, applied)
		}
		return err
	default:
		v, err := p.GetDBVersion(ctx)
		if err == nil {
			fmt.Fprintln(stdout, v)
		}
		return err
	}
}
