// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"

	"github.com/textmachine/outbox/db"
)

// StoredDigest is what a cross-check of the book with a sink's copy (`outbox check`) compares of one
// of a run's stored rows: the SHA-256 of the line the row stores, or, for a projected ledger row that
// keeps its key and not its line, the line's digest (LineDigest).
type StoredDigest struct {
	Seq int64
	// Whole says the row stores its line, and Sum is the line's SHA-256.
	Whole bool
	Sum   [sha256.Size]byte
	// Digest is a projected ledger row's LineDigest, when not Whole; empty when the row keeps
	// neither (a rollback of the schema dropped it): then there is nothing to compare.
	Digest []byte
}

// Compare reports whether line, whose SHA-256 is sum, is the row's line (same), and whether the row
// keeps anything to compare it with (compared).
func (d StoredDigest) Compare(line []byte, sum [sha256.Size]byte) (same, compared bool) {
	switch {
	case d.Whole:
		return sum == d.Sum, true
	case len(d.Digest) == LineDigestSize:
		return bytes.Equal(sum[:LineDigestSize], d.Digest), true
	}
	return false, false
}

// storedDigest is what a row read by db.LedgerRunRows or db.LedgerRowGet keeps of its line. An empty
// line, which no enqueue stores, is a ledger row whose line and digest a rollback dropped.
func storedDigest(seq int64, line []byte, emptied bool, digest []byte) StoredDigest {
	d := StoredDigest{Seq: seq}
	switch {
	case !emptied && len(line) > 0:
		d.Whole, d.Sum = true, sha256.Sum256(line)
	case len(digest) == LineDigestSize:
		d.Digest = bytes.Clone(digest)
	}
	return d
}

// StoredDigests returns the digests of up to limit of runID's stored rows with a seq after afterSeq,
// in seq order, from one snapshot. It hashes each line as it reads it and holds none, so a page
// of large lines costs a digest each: a check walks a run a page at a time in bounded memory.
func (s *Store) StoredDigests(ctx context.Context, runID string, afterSeq int64, limit int) ([]StoredDigest, error) {
	if limit < 1 {
		return nil, fmt.Errorf("outbox: StoredDigests: limit %d, need at least 1", limit)
	}
	var out []StoredDigest
	err := s.read(ctx, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.r.QueryContext(ctx, db.LedgerRunRows, runID, afterSeq, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq, emptied int64
			var line, digest sql.RawBytes
			if err := rows.Scan(&seq, &line, &emptied, &digest); err != nil {
				return err
			}
			out = append(out, storedDigest(seq, line, emptied != 0, digest))
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read the stored rows of run %q: %w", runID, err)
	}
	return out, nil
}

// StoredDigestAt returns the digest of runID's stored row of seq; ok is false when the book stores
// no such row (never given, or forgotten).
func (s *Store) StoredDigestAt(ctx context.Context, runID string, seq int64) (d StoredDigest, ok bool, err error) {
	err = s.read(ctx, func(ctx context.Context) error {
		row, err := s.q.LedgerRowGet(ctx, s.r, db.LedgerRowGetParams{EngineRunID: runID, Seq: seq})
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		d, ok = storedDigest(seq, row.Line, row.Emptied != 0, row.Digest), true
		return nil
	})
	if err != nil {
		return StoredDigest{}, false, fmt.Errorf("read the stored row of run %q at seq %d: %w", runID, seq, err)
	}
	return d, ok, nil
}

// RunOf returns one run's figures, as EveryRun gives them (without the stop and the oldest pending
// line's time); ok is false for a run the book never held.
func (s *Store) RunOf(ctx context.Context, runID string) (st RunStats, ok bool, err error) {
	err = s.read(ctx, func(ctx context.Context) error {
		r, err := s.q.RunGet(ctx, s.r, runID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		st, ok = runStats(runID, r.LastSeq, r.Projected, r.Forgotten, r.Lines, r.LedgerLines, 0, 0, 0, "", 0), true
		return nil
	})
	if err != nil {
		return RunStats{}, false, fmt.Errorf("read the figures of run %q: %w", runID, err)
	}
	return st, ok, nil
}
