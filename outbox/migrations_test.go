// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

func TestMigrateOnACallerOwnedDBMatchesOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/m.db"
	d := outboxtest.RawDBRW(t, path)
	if err := outbox.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	// The host program's own goose table is untouched: the outbox keeps its history apart.
	if outboxtest.TableNames(t, d)["goose_db_version"] {
		t.Error("Migrate used goose's default version table")
	}
	d.Close()
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	defer s.Close()
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 1 {
		t.Errorf("seq = %d", got)
	}
}

func TestSchemaRefusesAnEmptyRunIDAndASeqBelowOne(t *testing.T) {
	t.Parallel()
	_, path := outboxtest.Setup(t)
	d := outboxtest.RawDBRW(t, path)
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

func TestASchemaNewerThanTheLibraryIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	s.Close()
	known := migrations.Known()
	newer := known[len(known)-1] + 1
	d := outboxtest.RawDBRW(t, path)
	if _, err := d.Exec(`INSERT INTO `+migrations.TableName+` (version_id, is_applied) VALUES (?, 1)`, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Open(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) || !strings.Contains(err.Error(), fmt.Sprint(newer)) {
		t.Errorf("Open: %v, want ErrSchemaMismatch naming version %d", err, newer)
	}
	if _, err := outbox.OpenReadOnly(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) {
		t.Errorf("OpenReadOnly: %v, want ErrSchemaMismatch", err)
	}
	if err := outbox.Migrate(ctx, d); !errors.Is(err, outbox.ErrSchemaMismatch) {
		t.Errorf("Migrate: %v, want ErrSchemaMismatch", err)
	}
}

func TestABookMissingWhatTheProtocolReliesOnIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ drop, names string }{
		{`DROP INDEX events_outbox_once_key`, "events_outbox_once_key"},
		{`DROP INDEX events_outbox_announce_key`, "events_outbox_announce_key"},
		{`DROP INDEX events_outbox_once_key; CREATE INDEX events_outbox_once_key ON events_outbox (once_key)`, "uniqueness"},
		{`ALTER TABLE events_outbox DROP COLUMN enqueued_at`, "events_outbox.enqueued_at"},
		{`DROP TABLE outbox_progress`, "table outbox_progress"},
	} {
		s, path := outboxtest.Setup(t)
		s.Close()
		d := outboxtest.RawDBRW(t, path)
		if _, err := d.Exec(tc.drop); err != nil {
			t.Fatalf("%s: %v", tc.drop, err)
		}
		if _, err := outbox.Open(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("Open after %s: %v, want ErrSchemaMismatch naming %s", tc.drop, err, tc.names)
		}
		if _, err := outbox.OpenReadOnly(ctx, path); !errors.Is(err, outbox.ErrSchemaMismatch) {
			t.Errorf("OpenReadOnly after %s: %v, want ErrSchemaMismatch", tc.drop, err)
		}
	}
}
