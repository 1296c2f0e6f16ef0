// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"

	"github.com/riverqueue/river"
)

// The comparison is fair only if River's side stores the same bytes per event, at the same
// durability, and commits the job with the caller's row or not at all, as the outbox's side does.

func TestRiverArgumentIsAsLongAsTheEventLine(t *testing.T) {
	args, err := json.Marshal(riverEvent{Line: riverLine})
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != len(payload) {
		t.Fatalf("River's encoded argument is %d bytes, the event line %d", len(args), len(payload))
	}
}

func TestRiverRunsOnTheSameDriverAtFullInWAL(t *testing.T) {
	r := newRiverPeer(t)
	var sync int
	var mode string
	if err := r.db.QueryRow(`SELECT synchronous, journal_mode FROM pragma_synchronous, pragma_journal_mode`).Scan(&sync, &mode); err != nil {
		t.Fatal(err)
	}
	if sync != 2 || mode != "wal" {
		t.Fatalf("River's connection: synchronous=%d journal_mode=%s, want 2 (FULL) and wal", sync, mode)
	}
}

func TestRiverInsertTxCommitsTheJobWithTheCallersRowOrNeither(t *testing.T) {
	ctx := context.Background()
	r := newRiverPeer(t)
	if err := r.insertTx(ctx); err != nil {
		t.Fatal(err)
	}
	errUndo := errors.New("undo")
	err := r.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, unitDone); err != nil {
			return err
		}
		if _, err := r.client.InsertTx(ctx, tx, riverEvent{Line: riverLine}, nil); err != nil {
			return err
		}
		return errUndo
	})
	if !errors.Is(err, errUndo) {
		t.Fatalf("rolled-back transaction: %v", err)
	}
	if err := r.insertManyTx(ctx, []river.InsertManyParams{{Args: riverEvent{Line: riverLine}}, {Args: riverEvent{Line: riverLine}}}); err != nil {
		t.Fatal(err)
	}
	var units, jobs, argBytes int
	if err := r.db.QueryRow(`SELECT (SELECT COUNT(*) FROM units), COUNT(*), SUM(LENGTH(json(args))) FROM river_job WHERE kind = 'event'`).Scan(&units, &jobs, &argBytes); err != nil {
		t.Fatal(err)
	}
	if units != 1 || jobs != 3 || argBytes != 3*len(payload) {
		t.Fatalf("after one commit, one rollback and a batch of 2: %d units, %d jobs of %d bytes; want 1, 3, %d",
			units, jobs, argBytes, 3*len(payload))
	}
}

func TestOutboxEnqueueTxCommitsTheEventWithTheCallersRow(t *testing.T) {
	ctx := context.Background()
	o := newOutboxPeer(t)
	if err := o.enqueueTx(ctx); err != nil {
		t.Fatal(err)
	}
	var units int
	if err := o.s.ReadTx(ctx, func(tx *sql.Tx) error { return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM units`).Scan(&units) }); err != nil {
		t.Fatal(err)
	}
	lines, err := o.s.PendingEvents(ctx, "run", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if units != 1 || len(lines) != 1 || len(lines[0].Line) != len(payload) {
		t.Fatalf("after one EnqueueTx: %d units, %d lines; want 1 and 1 of %d bytes", units, len(lines), len(payload))
	}
}
