// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/textmachine/outbox/db"
)

// SinkKey is a once key a line in the sink carries: the line's seq, the key, and the line's digest
// (LineDigest), which the ledger keeps.
type SinkKey struct {
	Seq    int64
	Key    string
	Digest []byte
}

// acceptPage is how many stored lines AcceptSinkLines reads at a time to move their keys into the
// ledger.
const acceptPage = 512

// AcceptSinkLines records, in one transaction, that the sink holds every line of runID up to upTo,
// and puts into the ledger the once keys its lines carry among them (keys, in any order): the
// operator's acceptance of a sink's positions over a book restored from an older backup (outbox
// reconcile). After it the run is projected up to upTo and its next seq follows upTo; each line the
// book holds pending up to there is taken as projected, its announce key entering the ledger as the
// relay's record would; each key of keys enters the ledger with its seq and digest, unless the row
// of that seq already holds it. A key another row holds (in the ledger or pending), or a stored row
// of one of keys' seqs holding another key or none, is ErrAnnounceConflict, naming both, and nothing
// of the call is recorded. It may be called again with the same arguments: what is recorded stays.
// Keep keys to a few thousand a call: the call is one transaction.
func (s *Store) AcceptSinkLines(ctx context.Context, runID string, upTo int64, keys []SinkKey) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	if upTo < 1 {
		return fmt.Errorf("outbox: accept the sink's lines of run %q up to %d: a seq is at least 1", runID, upTo)
	}
	for _, k := range keys {
		if err := checkOnceKey(k.Key); err != nil {
			return fmt.Errorf("accept line %d of run %q: %w", k.Seq, runID, err)
		}
		if k.Seq < 1 || k.Seq > upTo {
			return fmt.Errorf("outbox: accept line %d of run %q: its seq is not in 1..%d", k.Seq, runID, upTo)
		}
	}
	err := s.write(ctx, durable, func(w *txWriter) error {
		p, err := s.q.ProgressGet(w.ctx, w.tx, runID)
		if err != nil {
			return mapErr(w.ctx, err)
		}
		// The lines the book holds pending up to upTo: the sink has them, so their announce keys
		// enter the ledger now, before the position passes them (a row below the position that
		// holds no ledger key is forgotten, and its announce key with it).
		for after := p.Projected; after < upTo; {
			rows, err := s.q.EventsPending(w.ctx, w.tx, db.EventsPendingParams{EngineRunID: runID, AfterSeq: after, MaxRows: acceptPage})
			if err != nil {
				return mapErr(w.ctx, err)
			}
			var marks []ledgerMark
			for _, r := range rows {
				if r.Seq > upTo {
					break
				}
				if r.ToMark != 0 {
					marks = append(marks, ledgerMark{seq: r.Seq, digest: LineDigest(r.Line)})
				}
			}
			if err := w.markProjected(runID, marks); err != nil {
				return err
			}
			if len(rows) < acceptPage || rows[len(rows)-1].Seq >= upTo {
				break
			}
			after = rows[len(rows)-1].Seq
		}
		for _, k := range keys {
			if err := s.acceptKey(w, runID, k); err != nil {
				return err
			}
		}
		if err := w.q.ProgressKeepLastSeq(w.ctx, w.tx, db.ProgressKeepLastSeqParams{EngineRunID: runID, LastSeq: upTo}); err != nil {
			return mapErr(w.ctx, err)
		}
		if err := w.setProgress(db.ProgressSetParams{EngineRunID: runID, Projected: upTo}); err != nil {
			return err
		}
		return w.clearStop(runID)
	})
	if err != nil {
		return fmt.Errorf("accept the sink's lines of run %q up to %d: %w", runID, upTo, err)
	}
	return nil
}

// acceptKey puts one key of the sink's line into the ledger, or finds it there.
func (s *Store) acceptKey(w *txWriter, runID string, k SinkKey) error {
	row, err := s.q.EventOnceKey(w.ctx, w.tx, db.EventOnceKeyParams{EngineRunID: runID, Seq: k.Seq})
	switch {
	case err == nil:
		if row.OnceKey == k.Key {
			return nil
		}
		held := row.OnceKey
		if held == "" {
			held = row.AnnounceKey
		}
		return fmt.Errorf("line %d carries once key %q in the sink, and the book's line %d holds %q: %w",
			k.Seq, k.Key, k.Seq, held, ErrAnnounceConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return mapErr(w.ctx, err)
	}
	other, err := s.q.EventKeyHolder(w.ctx, w.tx, k.Key)
	switch {
	case err == nil:
		return fmt.Errorf("line %d carries once key %q in the sink, and the book holds it on line %d of run %q "+
			"(an event announced again after the book lost it: retire that line, outbox retire): %w",
			k.Seq, k.Key, other.Seq, other.EngineRunID, ErrAnnounceConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return mapErr(w.ctx, err)
	}
	if err := w.q.LedgerPut(w.ctx, w.on(stmtLedgerPut), db.LedgerPutParams{EngineRunID: runID, Seq: k.Seq, OnceKey: k.Key, Digest: k.Digest}); err != nil {
		return fmt.Errorf("put once key %q of line %d into the ledger: %w", k.Key, k.Seq, mapErr(w.ctx, err))
	}
	return nil
}
