// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/textmachine/outbox/db"
)

// The ledger keeps the key, not the line. A once-keyed row the relay has recorded as projected keeps
// its key (in the ledger's unique index), its run and seq, and the digest of its line: what refusing
// a second announcement and cross-checking the book against its journal need. Its bytes are in the
// journal. The relay empties each such row in the transaction that records its batch projected;
// rows an earlier release left whole are emptied by Recover, in bounded steps (migrations/00006).

// LineDigestSize is the size of a line's digest in the ledger.
const LineDigestSize = 8

// LineDigest returns the digest the ledger keeps of a projected once-keyed line in place of its bytes:
// the first LineDigestSize bytes of its SHA-256. `outbox check` compares a journal line with such a
// row by it. It tells a line from another that a mistake, a restore or a bad copy put under the same
// run and seq, where two differing lines match with a chance of one in 2^64; it is no defence against
// someone who forges journal lines to match. Each byte more costs a byte of book a key, and the
// ledger's row is held to 150 (docs/BENCHMARKS.md).
func LineDigest(line []byte) []byte {
	sum := sha256.Sum256(line)
	return sum[:LineDigestSize:LineDigestSize]
}

// ledgerMark is a line whose once key enters the ledger when its batch is recorded, with the digest
// its row keeps in place of the line.
type ledgerMark struct {
	seq    int64
	digest []byte
}

// ledgerStep bounds how many ledger rows one transaction of emptyLedgerLines empties: each is read
// whole, one at a time, and rewritten, so a step's WAL is a few hundred pages.
const ledgerStep = 512

// emptyLedgerLines replaces the line of every ledger row at or below its run's projected position
// with its digest, ledgerStep rows a transaction, and returns how many it emptied. Rows the relay
// recorded are emptied when it records them; these are the rows an earlier release kept whole, and
// those MarkAnnounced marked before the relay recorded them projected. Each step is complete on its
// own, so a crash between steps loses nothing and the next call goes on from there; with no such row
// left it reads one empty index page.
func (s *Store) emptyLedgerLines(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int
		err := s.write(ctx, relaxed, func(w *txWriter) error {
			ctx, tx := w.ctx, w.tx
			rows, err := s.q.LedgerLinesToEmpty(ctx, tx, int64(s.cfg.ledgerStep))
			if err != nil {
				return fmt.Errorf("list the ledger's lines: %w", mapErr(ctx, err))
			}
			n = len(rows)
			for _, r := range rows {
				line, err := s.q.LedgerLineGet(ctx, tx, db.LedgerLineGetParams{EngineRunID: r.EngineRunID, Seq: r.Seq})
				if err != nil {
					return fmt.Errorf("read line %d of run %q: %w", r.Seq, r.EngineRunID, mapErr(ctx, err))
				}
				// An empty line is one a book migrated down and up again lost with its digest: it
				// is marked as having none.
				digest := []byte{}
				if len(line) > 0 {
					digest = LineDigest(line)
				}
				key, err := s.q.LedgerTakeLine(ctx, tx, db.LedgerTakeLineParams{EngineRunID: r.EngineRunID, Seq: r.Seq})
				if err != nil {
					return fmt.Errorf("empty line %d of run %q: %w", r.Seq, r.EngineRunID, mapErr(ctx, err))
				}
				err = s.q.LedgerPut(ctx, tx, db.LedgerPutParams{EngineRunID: r.EngineRunID, Seq: r.Seq, OnceKey: key, Digest: digest})
				if err != nil {
					return fmt.Errorf("empty line %d of run %q: %w", r.Seq, r.EngineRunID, mapErr(ctx, err))
				}
			}
			return s.giveBackPages(w)
		})
		if err != nil {
			return total, fmt.Errorf("empty the ledger's lines: %w", err)
		}
		total += int64(n)
		if n < s.cfg.ledgerStep {
			return total, nil
		}
	}
}

// freePagesKept is how many free pages a book keeps for the inserts to come before giving the rest
// back to the file system: the relay's forgets free a few pages a batch, and the next enqueues take
// them again, so giving back each one would move pages to and fro for nothing.
const freePagesKept = 256

// vacuumStep bounds the pages one transaction gives back: each moves up to a page from the end of
// the file into a free one, so a step costs at most that many pages of WAL.
const vacuumStep = 1024

// giveBackPages gives free pages beyond freePagesKept back to the file system, at most vacuumStep in
// w's transaction, when the book is in incremental auto-vacuum mode (a book created by this release
// is; an older one is after a VACUUM, see docs/OPERATING.md). The file shrinks at the next checkpoint.
func (s *Store) giveBackPages(w *txWriter) error {
	_, err := s.givePages(w)
	return err
}

// givePages is giveBackPages, returning how many free pages beyond freePagesKept are left.
func (s *Store) givePages(w *txWriter) (left int64, err error) {
	if !s.incrementalVacuum.Load() {
		return 0, nil
	}
	var free int64
	if err := w.tx.QueryRowContext(w.ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
		return 0, fmt.Errorf("count free pages: %w", mapErr(w.ctx, err))
	}
	if free <= freePagesKept {
		return 0, nil
	}
	n := min(free-freePagesKept, vacuumStep)
	if _, err := w.tx.ExecContext(w.ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", n)); err != nil {
		return 0, fmt.Errorf("give free pages back: %w", mapErr(w.ctx, err))
	}
	return free - freePagesKept - n, nil
}

// givePagesBack gives every free page beyond freePagesKept back, vacuumStep pages a transaction:
// Recover's forgets can free more in one transaction than one step gives back, and an engine that
// then stays idle would keep them.
func (s *Store) givePagesBack(ctx context.Context) error {
	for {
		var left int64
		err := s.write(ctx, relaxed, func(w *txWriter) (err error) {
			left, err = s.givePages(w)
			return err
		})
		if err != nil || left == 0 {
			return err
		}
	}
}

// Vacuum rewrites the book whole, in the mode that gives free pages back to the file system
// (auto_vacuum=INCREMENTAL), and checkpoints it, so that its file holds what the book holds: a book
// created by this release is in that mode from its start, and one created before it gives nothing
// back until it is vacuumed once. It returns how long the rewrite took.
//
// It is an operator's step, not the engine's: it holds the writer for the whole rewrite (every write
// of the store waits), writes the whole book into the WAL and back, and needs free disk as large as
// the book; docs/BENCHMARKS.md has its cost against the book's size. Run it after the first Recover
// of an upgraded book, which replaces the ledger's lines with their digests, so that it rewrites what
// is left. `outbox vacuum` runs it on a stopped engine's book.
func (s *Store) Vacuum(ctx context.Context) (time.Duration, error) {
	if err := s.enter(true); err != nil {
		return 0, err
	}
	defer s.exit()
	if err := s.checkNotInsideTx(); err != nil {
		return 0, err
	}
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("vacuum: wait for the writer: %w", mapErr(ctx, err))
	}
	defer conn.Close()
	start := time.Now()
	// The writer's commit hook refuses every commit the store does not make itself.
	err = s.wr.Commit(func() error {
		for _, stmt := range []string{"PRAGMA auto_vacuum=INCREMENTAL", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"} {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("vacuum: %s: %w", stmt, mapErr(ctx, err))
			}
		}
		return nil
	})
	if err != nil {
		return 0, s.named(err)
	}
	var mode int
	if err := conn.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
		return 0, fmt.Errorf("vacuum: %w", mapErr(ctx, err))
	}
	s.incrementalVacuum.Store(mode == 2)
	return time.Since(start), nil
}
