// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/testing/smallfs"
)

// TestEveryWriteOfTheInboxOnARealFullDiskIsENOSPCAndConsumesNothing fills a real small file system
// under a consumer's database and applies lines, from a batch and from a journal file elsewhere: each
// call must be errors.Is syscall.ENOSPC, and once space is back no seq was consumed, no row written
// and no source position stored, and the same calls apply everything.
func TestEveryWriteOfTheInboxOnARealFullDiskIsENOSPCAndConsumesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := smallfs.Mount(t)
	path := filepath.Join(dir, "consumer.db")
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, in, [][]byte{line("a", 1)})
	journalPath := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(journalPath, append(bytes.Join(lines("b", 1, 5), []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}

	free := smallfs.Fill(t, dir)
	if _, err := in.Apply(ctx, [][]byte{line("a", 2)}, insertHandler); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Apply on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	if _, err := in.ApplyFile(ctx, journalPath, insertHandler); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("ApplyFile on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO applied (run, seq, line) VALUES ('own', 1, x'00')`)
		return err
	}); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("WriteTx on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	free()

	if p := position(t, in, "a"); p != 1 {
		t.Errorf("run a's position after the full disk: %d, want 1", p)
	}
	if p := position(t, in, "b"); p != 0 {
		t.Errorf("run b's position after the full disk: %d, want 0", p)
	}
	if sources, err := in.Sources(ctx); err != nil || len(sources) != 0 {
		t.Errorf("sources after the full disk: %v, %v; want none", sources, err)
	}
	if rep, err := in.Apply(ctx, [][]byte{line("a", 2)}, insertHandler); err != nil || rep.Applied != 1 {
		t.Errorf("Apply once space is back: %+v, %v", rep, err)
	}
	if rep, err := in.ApplyFile(ctx, journalPath, insertHandler); err != nil || rep.Applied != 5 {
		t.Errorf("ApplyFile once space is back: %+v, %v", rep, err)
	}
	var rows int
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FROM applied`).Scan(&rows)
	}); err != nil || rows != 7 {
		t.Errorf("rows applied: %d, %v; want 7, each line once", rows, err)
	}
}

// TestOpeningOrMigratingAnInboxOnARealFullDiskIsENOSPC opens and migrates a new consumer's database
// on a full file system, then opens it again once space is back.
func TestOpeningOrMigratingAnInboxOnARealFullDiskIsENOSPC(t *testing.T) {
	t.Parallel()
	dir := smallfs.Mount(t)
	free := smallfs.Fill(t, dir)
	path := filepath.Join(dir, "consumer.db")
	in, err := inbox.Open(context.Background(), path)
	if err == nil {
		in.Close()
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Open on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	if err := inbox.RunLocked(context.Background(), path, migrations.Up); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Migrate on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	free()
	in, err = inbox.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open once space is back: %v", err)
	}
	defer in.Close()
	if _, err := in.Apply(context.Background(), [][]byte{line("a", 1)}, insertNothing); err != nil {
		t.Errorf("Apply once space is back: %v", err)
	}
}
