// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/textmachine/outbox/inbox/internal/db"
)

// Quarantine is a run that the inbox applies nothing more of until it is released.
type Quarantine struct {
	RunID    string
	Reason   string // "gap", "conflict" or "handler"
	Expected int64  // the seq the run needed next, 0 for none (the run has applied the last seq a run can have); for "handler", the line's own seq
	Got      int64  // the seq that came
	Detail   string // what happened; for a conflict, both digests
	Since    time.Time
}

// Position returns the run's high-water mark, the last seq applied; 0 for a run never seen. It reads
// on the read pool, never waiting for a running Apply.
func (in *Inbox) Position(ctx context.Context, runID string) (int64, error) {
	var hwm int64
	err := in.read(ctx, func() (err error) {
		hwm, err = in.q.RunPosition(ctx, in.r, runID)
		return err
	})
	if err != nil {
		return 0, wrapf(err, "position of run %q", runID)
	}
	return hwm, nil
}

// pageRows bounds each read of a listing: a listing of many rows is read in pages, never in one
// statement that holds a read snapshot for long.
const pageRows = 1000

// Quarantined lists the quarantined runs, in run id order. It reads on the read pool, never waiting
// for a running Apply.
func (in *Inbox) Quarantined(ctx context.Context) ([]Quarantine, error) {
	var out []Quarantine
	err := in.read(ctx, func() error {
		after := ""
		for {
			rows, err := in.q.QuarantinesAfter(ctx, in.r, db.QuarantinesAfterParams{After: after, MaxRows: pageRows})
			if err != nil {
				return err
			}
			for _, r := range rows {
				out = append(out, quarantineOf(r))
			}
			if len(rows) < pageRows {
				return nil
			}
			after = rows[len(rows)-1].EngineRunID
		}
	})
	if err != nil {
		return nil, wrapf(err, "list the quarantined runs")
	}
	return out, nil
}

func quarantineOf(r db.InboxQuarantine) Quarantine {
	return Quarantine{RunID: r.EngineRunID, Reason: r.Reason, Expected: r.Expected, Got: r.Got, Detail: r.Detail,
		Since: time.Unix(0, r.Since)}
}

// Release lifts the run's quarantine: the run goes on from its high-water mark + 1. In the same
// transaction every source's position is rewound, so each source reads again from its start (a
// journal source from the first segment that can hold the next line of a run it needs, found in the
// seal indexes: see ApplyJournal; the position it registered with the journal is lowered there
// first); its lines already applied are duplicates. A gap that is still there quarantines the run again. A run
// that is not quarantined is ErrNotQuarantined.
func (in *Inbox) Release(ctx context.Context, runID string) error {
	if in.checkNotInsideTx(ctx) == nil {
		in.lowerJournalReaders(ctx, runID)
	}
	err := in.write(ctx, func(t *txn) error {
		n, err := in.q.QuarantineDelete(t.ctx, t.tx, runID)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotQuarantined
		}
		return t.rewindSources()
	})
	if err != nil {
		return wrapf(err, "release run %q", runID)
	}
	in.lowerJournalReaders(ctx, runID)
	in.cfg.logger.Info("inbox: run released", "run", runID)
	return nil
}

// AcceptGap is the operator's explicit way past a gap that cannot be filled (a line really lost):
// for a run quarantined for a gap, it records the decision (the run, the seqs given up, the reason,
// who: WithOperator or the operating system's user, and when), moves the run's high-water mark to
// the seq before the one that came, lifts the quarantine and rewinds every source, all in one
// transaction. The seqs given up are never applied: if they come later, they are Stale. A run not
// quarantined is ErrNotQuarantined; one quarantined for a conflict or by its handler is ErrNotGap.
func (in *Inbox) AcceptGap(ctx context.Context, runID, reason string) error {
	if err := checkReason(reason); err != nil {
		return err
	}
	if in.checkNotInsideTx(ctx) == nil {
		in.lowerJournalReaders(ctx, runID)
	}
	var q db.InboxQuarantine
	err := in.write(ctx, func(t *txn) error {
		var err error
		q, err = in.q.QuarantineGet(t.ctx, t.tx, runID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotQuarantined
		case err != nil:
			return err
		case q.Reason != "gap":
			return fmt.Errorf("%w (it is quarantined for a %s)", ErrNotGap, q.Reason)
		}
		if err := in.q.GapAcceptedInsert(t.ctx, t.tx, db.GapAcceptedInsertParams{
			EngineRunID: runID, FirstSeq: q.Expected, LastSeq: q.Got - 1, Reason: reason,
			AcceptedBy: in.cfg.operator, AcceptedAt: t.now,
		}); err != nil {
			return err
		}
		if err := in.q.RunSet(t.ctx, t.tx, db.RunSetParams{EngineRunID: runID, Hwm: q.Got - 1, AppliedAt: t.now}); err != nil {
			return err
		}
		t.touch()
		if _, err := in.q.QuarantineDelete(t.ctx, t.tx, runID); err != nil {
			return err
		}
		return t.rewindSources()
	})
	if err != nil {
		return wrapf(err, "accept the gap of run %q", runID)
	}
	in.lowerJournalReaders(ctx, runID)
	in.cfg.logger.Warn("inbox: gap accepted", "run", runID, "first_seq", q.Expected, "last_seq", q.Got-1,
		"reason", reason, "by", in.cfg.operator)
	return nil
}

// MaxReasonLen bounds the reason recorded with an accepted gap, in bytes.
const MaxReasonLen = 4096

func checkReason(reason string) error {
	if err := checkName("reason", reason, MaxReasonLen); err != nil {
		return fmt.Errorf("%w (AcceptGap records why the seqs were given up)", err)
	}
	return nil
}

// AcceptedGap is one operator's decision recorded by AcceptGap.
type AcceptedGap struct {
	RunID              string
	FirstSeq, LastSeq  int64 // the seqs given up
	Reason, AcceptedBy string
	AcceptedAt         time.Time
}

// AcceptedGaps lists every gap accepted, in the order they were accepted.
func (in *Inbox) AcceptedGaps(ctx context.Context) ([]AcceptedGap, error) {
	var out []AcceptedGap
	err := in.read(ctx, func() error {
		var after int64
		for {
			rows, err := in.q.GapsAcceptedAfter(ctx, in.r, db.GapsAcceptedAfterParams{After: after, MaxRows: pageRows})
			if err != nil {
				return err
			}
			for _, r := range rows {
				out = append(out, AcceptedGap{RunID: r.EngineRunID, FirstSeq: r.FirstSeq, LastSeq: r.LastSeq,
					Reason: r.Reason, AcceptedBy: r.AcceptedBy, AcceptedAt: time.Unix(0, r.AcceptedAt)})
			}
			if len(rows) < pageRows {
				return nil
			}
			after = rows[len(rows)-1].ID
		}
	})
	if err != nil {
		return nil, wrapf(err, "list the accepted gaps")
	}
	return out, nil
}

// Run is one run as the inbox has applied it.
type Run struct {
	RunID     string
	Position  int64     // the high-water mark: the last seq applied (or given up by AcceptGap)
	LastApply time.Time // when it last applied a line (or had a gap accepted)
}
