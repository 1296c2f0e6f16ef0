// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
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
