package tests

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

func rawDBRW(t testing.TB, path string) *sql.DB {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	d.SetMaxOpenConns(1)
	t.Cleanup(func() { d.Close() })
	return d
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

func tableNames(t testing.TB, d *sql.DB) map[string]bool {
	t.Helper()
	rows, err := d.Query(`SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		out[n] = true
	}
	return out
}

func TestMigrationsGoUpDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := rawDBRW(t, t.TempDir()+"/m.db")
	p, err := migrations.NewProvider(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if !tableNames(t, d)["events_outbox"] || !tableNames(t, d)["events_outbox_once_key"] {
		t.Fatalf("after up: %v", tableNames(t, d))
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	for name := range tableNames(t, d) {
		if name != migrations.TableName {
			t.Errorf("after down, %s is left", name)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sources := p.ListSources()
	if want := sources[len(sources)-1].Version; v != want {
		t.Errorf("version %d, want %d", v, want)
	}
}

func TestMigrateOnACallerOwnedDBMatchesOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/m.db"
	d := rawDBRW(t, path)
	if err := outbox.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	// The host program's own goose table is untouched: the outbox keeps its history apart.
	if tableNames(t, d)["goose_db_version"] {
		t.Error("Migrate used goose's default version table")
	}
	d.Close()
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	defer s.Close()
	if got := mustEnqueue(t, s, "r"); got != 1 {
		t.Errorf("seq = %d", got)
	}
}

func TestSchemaRefusesAnEmptyRunIDAndASeqBelowOne(t *testing.T) {
	t.Parallel()
	_, path := setup(t)
	d := rawDBRW(t, path)
	for _, q := range []string{
		`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('', 1, x'61')`,
		`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('r', 0, x'61')`,
		`INSERT INTO events_outbox (engine_run_id, seq, line) VALUES ('r', -3, x'61')`,
	} {
		if _, err := d.Exec(q); err == nil {
			t.Errorf("schema accepted: %s", q)
		}
	}
}
