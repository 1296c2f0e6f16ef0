// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

func TestAStreamLineQuarantinedByAHandlerThatOpenedASavepointNamedInboxLineAppliesOnceAfterRelease(t *testing.T) {
	ctx := context.Background()
	_, js, in := consumeSetup(t)
	err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE writes (n INTEGER PRIMARY KEY, what TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	publishRun(t, js, "a", 1, 2)
	publishRun(t, js, "b", 1, 1)
	write := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO writes (what) VALUES (?)`, fmt.Sprintf("%s/%d", ev.RunID, ev.Seq))
		return err
	}
	refuse := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := write(ctx, tx, ev); err != nil {
			return err
		}
		if ev.RunID == "a" && ev.Seq == 2 {
			if _, err := tx.ExecContext(ctx, `SAVEPOINT inbox_line`); err != nil {
				return err
			}
			return fmt.Errorf("not yet: %w", inbox.ErrQuarantine)
		}
		return nil
	}
	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, refuse)
	if err != nil || rep != (inbox.Report{Applied: 2, Quarantined: 1}) {
		t.Fatalf("ApplyStream: %+v, %v", rep, err)
	}
	if err := in.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rep, err = jetstream.ApplyStream(ctx, js, "EVENTS", in, write)
	if err != nil || rep != (inbox.Report{Applied: 1, Duplicates: 2}) {
		t.Fatalf("after the release: %+v, %v", rep, err)
	}
	var got []string
	err = in.WriteTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.Query(`SELECT what FROM writes ORDER BY n`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			got = append(got, s)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/1", "b/1", "a/2"}, got); diff != "" {
		t.Errorf("writes (-want +got): each line once\n%s", diff)
	}
}
