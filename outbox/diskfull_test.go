// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/internal/testing/smallfs"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestEveryWriteOfTheStoreOnARealFullDiskIsENOSPCAndStoresNothing fills a real small file system
// under a book and makes each kind of write: grouped and ungrouped enqueues, a once key, a batch, a
// WriteTx with the caller's own row, and the relay's record of a batch the journal took. Each must be
// errors.Is syscall.ENOSPC, and once space is back nothing of them is stored, no seq is used, and the
// store goes on.
func TestEveryWriteOfTheStoreOnARealFullDiskIsENOSPCAndStoresNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group commit %v", group), func(t *testing.T) {
			dir := smallfs.Mount(t)
			s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"), outbox.WithGroupCommit(group))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`CREATE TABLE spend (seq INTEGER PRIMARY KEY, cents INTEGER NOT NULL)`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			// The journal is elsewhere: only the book's disk is full.
			j, err := journal.OpenFile(filepath.Join(t.TempDir(), "journal.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			relay := outboxtest.FastRelay(t, s, j, "r", outbox.WithFlushAttempts(1))
			line := func(seq int64) ([]byte, error) {
				return fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"pad":"%0200d"}`, seq, 0), nil
			}
			for range 3 {
				if _, err := s.EnqueueEvent(ctx, "r", line); err != nil {
					t.Fatal(err)
				}
			}

			free := smallfs.Fill(t, dir)
			writes := []struct {
				name string
				call func() error
			}{
				{"EnqueueEvent", func() error { _, err := s.EnqueueEvent(ctx, "r", line); return err }},
				{"EnqueueOnce", func() error { _, _, err := s.EnqueueOnce(ctx, "r", "key", line); return err }},
				{"EnqueueEvents", func() error {
					_, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{line, line})
					return err
				}},
				{"WriteTx", func() error {
					return s.WriteTx(ctx, func(tx *sql.Tx) error {
						seq, err := s.EnqueueTx(ctx, tx, "r", line)
						if err != nil {
							return err
						}
						_, err = tx.Exec(`INSERT INTO spend (seq, cents) VALUES (?, 100)`, seq)
						return err
					})
				}},
				{"the relay's record", func() error { return relay.Flush(ctx) }},
			}
			for _, w := range writes {
				if err := w.call(); !errors.Is(err, syscall.ENOSPC) {
					t.Errorf("%s on a full disk: %v, want errors.Is syscall.ENOSPC", w.name, err)
				}
			}
			free()

			if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r")); len(got) != 3 {
				t.Errorf("stored after the full disk: %v, want the 3 lines enqueued before it", got)
			}
			if seq, err := s.EnqueueEvent(ctx, "r", line); err != nil || seq != 4 {
				t.Errorf("EnqueueEvent once space is back: seq %d, %v; want seq 4", seq, err)
			}
			var spend int
			if err := s.ReadTx(ctx, func(tx *sql.Tx) error { return tx.QueryRow(`SELECT count(*) FROM spend`).Scan(&spend) }); err != nil || spend != 0 {
				t.Errorf("spend rows after the full disk: %d, %v; want none", spend, err)
			}
			// The journal took the first batch before the record failed: it is sent again, once.
			if err := relay.Flush(ctx); err != nil {
				t.Fatalf("Flush once space is back: %v", err)
			}
			if p, err := s.Projected(ctx, "r"); err != nil || p != 4 {
				t.Errorf("projected once space is back: %d, %v; want 4", p, err)
			}
			if last, err := j.LastSeq("r"); err != nil || last != 4 {
				t.Errorf("journal's last seq: %d, %v; want 4", last, err)
			}
		})
	}
}

// TestOpeningABookOnARealFullDiskIsENOSPCAndLeavesNoBook opens a new book on a full file system.
func TestOpeningABookOnARealFullDiskIsENOSPCAndLeavesNoBook(t *testing.T) {
	t.Parallel()
	dir := smallfs.Mount(t)
	free := smallfs.Fill(t, dir)
	defer func() { free() }()
	path := filepath.Join(dir, "book.db")
	s, err := outbox.Open(context.Background(), path)
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Open on a full disk: %v, want errors.Is syscall.ENOSPC", err)
	}
	free()
	free = func() {}
	// Whatever Open left, the next Open makes a whole book of it.
	s, err = outbox.Open(context.Background(), path)
	if err != nil {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("Open once space is back: %v (directory: %v)", err, entries)
	}
	defer s.Close()
	if seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("x")); err != nil || seq != 1 {
		t.Errorf("first EnqueueEvent: seq %d, %v", seq, err)
	}
}

func TestDiskFullIsNamedAndStoresNothing(t *testing.T) {
	t.Parallel()
	setupCalls, total := outboxtest.CountCalls(t, 12)
	named := 0
	for at := setupCalls + 1; at <= total; at++ {
		s, _, path, _ := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.FailAt, v.FailWith = at, sqlite3.FULL })
		acked, err := outboxtest.Workload(s, 12)
		if err != nil && !errors.Is(err, outbox.ErrNotDurable) {
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "full") {
				t.Errorf("disk full at call %d: %v, want an error naming it (ENOSPC)", at, err)
			}
			named++
		}
		s.Close()
		outboxtest.CheckDurable(t, fmt.Sprintf("disk full at call %d", at), path, acked)
	}
	if named == 0 {
		t.Error("no full disk reached a call")
	}
}
