// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/textmachine/outbox/db"
)

// MarkAnnounced records in the ledger that the lines of runID named in keyBySeq have reached the
// journal, each under its once key. Call it only after the journal has the lines. The batch is one
// transaction: marking an event with the key it already holds is a no-op, and a key that another
// event holds (ErrAnnounceConflict), an event that already holds another key (ErrAnnounceConflict) or
// a seq without a row (ErrUnknownEvent) fails the call and marks nothing.
func (s *Store) MarkAnnounced(ctx context.Context, runID string, keyBySeq map[int64]string) error {
	if err := checkRunID(runID); err != nil {
		return err
	}
	for seq, key := range keyBySeq {
		if err := checkOnceKey(key); err != nil {
			return fmt.Errorf("mark line %d of run %q: %w", seq, runID, err)
		}
	}
	if len(keyBySeq) == 0 {
		return nil
	}
	return s.write(ctx, durable, func(w *txWriter) error {
		return s.markAnnounced(w.ctx, w.tx, runID, keyBySeq)
	})
}

func (s *Store) markAnnounced(ctx context.Context, tx *sql.Tx, runID string, keyBySeq map[int64]string) error {
	for _, seq := range slices.Sorted(maps.Keys(keyBySeq)) {
		key := keyBySeq[seq]
		n, err := s.q.EventMarkAnnounced(ctx, tx, db.EventMarkAnnouncedParams{OnceKey: key, EngineRunID: runID, Seq: seq})
		if err != nil {
			return fmt.Errorf("mark line %d of run %q announced as %q: %w", seq, runID, key, mapErr(ctx, err))
		}
		if n == 1 {
			continue
		}
		row, err := s.q.EventOnceKey(ctx, tx, db.EventOnceKeyParams{EngineRunID: runID, Seq: seq})
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("mark line %d of run %q announced: %w", seq, runID, ErrUnknownEvent)
		case err != nil:
			return fmt.Errorf("mark line %d of run %q announced: %w", seq, runID, mapErr(ctx, err))
		}
		held := row.OnceKey
		if held == "" || held == key {
			held = row.AnnounceKey
		}
		if held != "" && held != key {
			return fmt.Errorf("mark line %d of run %q announced as %q: it holds %q: %w",
				seq, runID, key, held, ErrAnnounceConflict)
		}
		// The row is free: another row holds the key pending.
		other, err := s.q.EventKeyHolder(ctx, tx, key)
		if err != nil {
			return fmt.Errorf("mark line %d of run %q announced as %q: %w", seq, runID, key, mapErr(ctx, err))
		}
		return fmt.Errorf("mark line %d of run %q announced as %q: line %d of run %q holds it pending: %w",
			seq, runID, key, other.Seq, other.EngineRunID, ErrAnnounceConflict)
	}
	return nil
}

// AnnouncedOnceKeys returns the ledger: every key that MarkAnnounced recorded, that is every event a
// reader has been told of. Keys of events merely enqueued are not in it.
func (s *Store) AnnouncedOnceKeys(ctx context.Context) (map[string]bool, error) {
	var keys []string
	err := s.read(ctx, func(ctx context.Context) (err error) {
		keys, err = s.q.EventsAnnouncedKeys(ctx, s.r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}
