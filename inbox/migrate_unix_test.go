// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/outbox"
)

func TestMigrateCreatesAMissingDatabaseAndAnInboxOpensWhatItMigrated(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "consumer.db")
	err := inbox.RunLocked(ctx, path, func(ctx context.Context, d *sql.DB) error {
		return migrations.Up(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatalf("the migrated database is no inbox: %v", err)
	}
	in.Close()
}

func TestMigrateHoldsTheInboxsLock(t *testing.T) {
	ctx := context.Background()
	in, path := setup(t)
	err := inbox.RunLocked(ctx, path, func(context.Context, *sql.DB) error {
		t.Error("ran beside an open Inbox")
		return nil
	})
	if !errors.Is(err, inbox.ErrLocked) {
		t.Errorf("beside an open Inbox: %v, want ErrLocked", err)
	}
	in.Close()
	err = inbox.RunLocked(ctx, path, func(context.Context, *sql.DB) error {
		other, err := inbox.Open(ctx, path)
		if err == nil {
			other.Close()
		}
		if !errors.Is(err, inbox.ErrLocked) {
			t.Errorf("Open while Migrate runs: %v, want ErrLocked", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMigrateRefusesABookAndWhatIsNotADatabaseCreatingNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bookPath := filepath.Join(dir, "book.db")
	s, err := outbox.Open(ctx, bookPath)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	journalPath := filepath.Join(dir, "journal.jsonl")
	if err := os.WriteFile(journalPath, []byte(`{"engine_run_id":"a","seq":1,"data":null}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A FIFO of its own directory, whose names are compared: a snapshot reads each file, and a FIFO
	// read would block.
	fifoDir := t.TempDir()
	fifo := filepath.Join(fifoDir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(fifoDir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{
		{bookPath, inbox.ErrOutboxDatabase},
		{journalPath, inbox.ErrNotDatabase},
		{fifo, inbox.ErrNotDatabase},
		{sub, inbox.ErrNotDatabase},
	} {
		before, beforeFIFO := dirstate.Snapshot(t, dir), names(t, fifoDir)
		err := inbox.RunLocked(ctx, tc.path, func(context.Context, *sql.DB) error {
			t.Errorf("%s: ran", tc.path)
			return nil
		})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.path, err, tc.want)
		}
		if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("%s changed the directory (-before +after):\n%s", tc.path, diff)
		}
		if diff := cmp.Diff(beforeFIFO, names(t, fifoDir)); diff != "" {
			t.Errorf("%s changed the FIFO's directory (-before +after):\n%s", tc.path, diff)
		}
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestMigrateWithACancelledContextDoesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := filepath.Join(t.TempDir(), "consumer.db")
	err := inbox.RunLocked(ctx, path, func(context.Context, *sql.DB) error {
		t.Error("ran")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%v, want context.Canceled", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file was created: %v", err)
	}
}
