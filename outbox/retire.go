// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/textmachine/outbox/db"
)

// MaxRetireReasonLen bounds RetireEvent's reason, in bytes.
const MaxRetireReasonLen = 4096

// retiredTimeFormat is the journal's layout of "at" (journal.TimeFormat), so that a tombstone reads
// as a line journal.Builder rendered.
const retiredTimeFormat = "2006-01-02T15:04:05.000000000Z"

// retiredLine is journal.Builder(runID, "retired", data)'s line, rendered here because the journal
// package depends on this one, not the reverse: the same members in the same order, encoded by
// encoding/json as the builder's are.
type retiredLine struct {
	RunID string      `json:"engine_run_id"`
	Seq   int64       `json:"seq"`
	Type  string      `json:"type"`
	At    string      `json:"at"`
	Data  retiredData `json:"data"`
}

// retiredData is a tombstone's data: members in name order, as encoding/json writes a map's.
type retiredData struct {
	OnceKey string `json:"once_key,omitempty"` // the once key the retired line announced, freed again
	Reason  string `json:"reason"`
	SHA256  string `json:"sha256"` // of the retired line's bytes, hex
	Size    int    `json:"size"`   // of the retired line, in bytes
}

// RetireEvent replaces runID's stored line seq, one the sink does not have yet, with a tombstone of
// the same key, in one transaction: the journal line
//
//	{"engine_run_id":…,"seq":…,"type":"retired","at":…,"data":{"reason":…,"sha256":…,"size":…}}
//
// that journal.Builder(runID, "retired", …) would render, carrying reason and the SHA-256 and size of
// the bytes it replaces (and "once_key", when the line announced one: the key is freed, since no
// reader was told of it). The run then projects on without a gap, and the reader sees what was
// retired and why. It is the way out for a line the sink refuses (the relay stopped at it:
// RunStats.StoppedSeq), and keeps the run's other lines. Read the line first (PendingEvents) to keep
// its bytes.
//
// A line already projected, or in a batch the sink has taken but the store has not recorded, is
// ErrProjected; a seq with no stored row is ErrUnknownEvent. It waits for the run's turn, so no relay
// of this store is sending the line meanwhile. The reason must be valid UTF-8, non-empty and at most
// MaxRetireReasonLen bytes.
func (s *Store) RetireEvent(ctx context.Context, runID string, seq int64, reason string) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	switch {
	case seq < 1:
		return fmt.Errorf("outbox: retire line %d of run %q: a seq is at least 1", seq, runID)
	case reason == "", len(reason) > MaxRetireReasonLen, !utf8.ValidString(reason):
		return fmt.Errorf("outbox: retire line %d of run %q: the reason must be valid UTF-8 of 1 to %d bytes", seq, runID, MaxRetireReasonLen)
	}
	if err := s.enter(true); err != nil {
		return err
	}
	defer s.exit()
	// Before the run's turn, not only at the write: a relay holding the turn waits for its record,
	// which waits for the writer a transaction around this call holds.
	if err := s.checkNotInsideTx(); err != nil {
		return fmt.Errorf("retire line %d of run %q: %w", seq, runID, err)
	}
	turn, err := s.proj.acquire(ctx, runID)
	if err != nil {
		return fmt.Errorf("retire line %d of run %q: %w", seq, runID, err)
	}
	defer s.proj.release(runID, turn)
	if b := turn.Held.unrecorded; b != nil && b.runID == runID && b.last >= seq {
		return fmt.Errorf("retire line %d of run %q: the sink has it, not yet recorded: %w", seq, runID, ErrProjected)
	}
	err = s.write(ctx, durable, func(w *txWriter) error {
		return s.retire(w, runID, seq, reason)
	})
	if err != nil {
		return fmt.Errorf("retire line %d of run %q: %w", seq, runID, err)
	}
	return nil
}

func (s *Store) retire(w *txWriter, runID string, seq int64, reason string) error {
	ctx, tx := w.ctx, w.tx
	p, err := s.q.ProgressGet(ctx, tx, runID)
	if err != nil {
		return mapErr(ctx, err)
	}
	if seq <= p.Projected {
		return fmt.Errorf("the run is projected up to %d: %w", p.Projected, ErrProjected)
	}
	row, err := s.q.EventGet(ctx, tx, db.EventGetParams{EngineRunID: runID, Seq: seq})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrUnknownEvent
	case err != nil:
		return mapErr(ctx, err)
	case row.OnceKey != "":
		return fmt.Errorf("its once key is in the ledger: %w", ErrProjected)
	}
	sum := sha256.Sum256(row.Line)
	line, err := json.Marshal(retiredLine{RunID: runID, Seq: seq, Type: "retired", At: time.Now().UTC().Format(retiredTimeFormat),
		Data: retiredData{OnceKey: row.AnnounceKey, Reason: reason, SHA256: hex.EncodeToString(sum[:]), Size: len(row.Line)}})
	if err != nil {
		return err
	}
	if err := s.checkLine(line); err != nil {
		return fmt.Errorf("the tombstone: %w", err)
	}
	if check := s.cfg.lineCheck; check != nil {
		if err := callCheck(check, runID, seq, line); err != nil {
			return fmt.Errorf("the tombstone: %w: %w", ErrInvalidLine, raise(err))
		}
	}
	n, err := s.q.EventRetire(ctx, tx, db.EventRetireParams{Line: line, EngineRunID: runID, Seq: seq})
	switch {
	case err != nil:
		return mapErr(ctx, err)
	case n != 1:
		return errInsertIgnored
	}
	if row.Spill != 0 {
		if err := s.q.EventLineDelete(ctx, tx, row.Spill); err != nil {
			return fmt.Errorf("delete the large line: %w", mapErr(ctx, err))
		}
	}
	return nil
}
