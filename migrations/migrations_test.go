// SPDX-License-Identifier: Apache-2.0

package migrations_test

import (
	"context"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/migrations"
)

func TestMigrationsGoUpDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := outboxtest.RawDBRW(t, t.TempDir()+"/m.db")
	p, err := migrations.NewProvider(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if !outboxtest.TableNames(t, d)["events_outbox"] || !outboxtest.TableNames(t, d)["events_outbox_once_key"] {
		t.Fatalf("after up: %v", outboxtest.TableNames(t, d))
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	for name := range outboxtest.TableNames(t, d) {
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
