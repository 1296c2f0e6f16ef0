// SPDX-License-Identifier: Apache-2.0

package migrations_test

import (
	"context"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// beforeDigests is the latest version before the ledger kept digests in place of lines.
func beforeDigests() int64 {
	v := int64(0)
	for _, k := range migrations.Known() {
		if k < 6 {
			v = k
		}
	}
	return v
}

// emptiedLedger returns, by key, the lines and digests of the ledger rows of the book at dbPath.
func emptiedLedger(t *testing.T, dbPath string, withDigest bool) map[string]string {
	t.Helper()
	q := `SELECT once_key, hex(line) || '/' || 'none' FROM events_outbox WHERE once_key <> ''`
	if withDigest {
		q = `SELECT once_key, hex(line) || '/' || COALESCE(hex(digest), 'null') FROM events_outbox WHERE once_key <> ''`
	}
	rows, err := outboxtest.RawDB(t, dbPath).Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

func TestALedgerMigratedDownKeepsItsKeysAndNeverSendsTheLinesItNoLongerHas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath, jPath := recoveredBook(t)
	before := verifyFile(t, jPath)
	for k, v := range emptiedLedger(t, dbPath, true) {
		if len(v) != 1+2*outbox.LineDigestSize {
			t.Fatalf("ledger row %s before the rollback: %s, want no line and its digest", k, v)
		}
	}
	migrateDownTo(t, dbPath, beforeDigests())
	// Every key stays, with an empty line: the bytes are in the journal only.
	got := emptiedLedger(t, dbPath, false)
	for _, k := range []string{"done:2", "done:5", "keytop:3"} {
		if got[k] != "/none" {
			t.Errorf("ledger row %s after the rollback: %q, want an empty line", k, got[k])
		}
	}
	rep := recoverInto(t, dbPath, jPath)
	if got, want := runLines(rep), "done 6, keytop 3, gone 5, live 4 lines"; got != want {
		t.Errorf("journal after recovery: %s, want %s", got, want)
	}
	if rep.Runs["done"].Duplicates != 0 || rep.Runs["keytop"].Duplicates != 0 || rep.Lines != before.Lines+2 {
		t.Errorf("journal: %d lines (%d before), done %d and keytop %d sent again",
			rep.Lines, before.Lines, rep.Runs["done"].Duplicates, rep.Runs["keytop"].Duplicates)
	}
	// Migrated up again, the rows are marked as having no digest, and their keys still refuse.
	for _, k := range []string{"done:2", "done:5", "keytop:3"} {
		if v := emptiedLedger(t, dbPath, true)[k]; v != "/" {
			t.Errorf("ledger row %s after up again: %q, want an empty line and an empty digest", k, v)
		}
	}
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, _, err := s.EnqueueOnce(ctx, "after", "done:5", journal.Builder("after", "x", 1)); ok || err != nil {
		t.Errorf("EnqueueOnce of a key kept through the rollback: %v, %v", ok, err)
	}
}
