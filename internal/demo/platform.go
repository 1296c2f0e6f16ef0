// SPDX-License-Identifier: Apache-2.0

package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/faultpoint"
)

// PlatformConfig describes one start of the platform: the reader of the journal, which applies it
// through an inbox into a database of its own, counting each unit once (from its unit_done line) and
// summing the spend.
type PlatformConfig struct {
	DB      string // the platform's own database, never the book
	Journal string // the journal it reads, when Source is nil: a file, or a segmented journal's directory
	// JournalDir says Journal is a journal directory even before it exists (FollowJournal waits for
	// it); without it, Journal is a directory when one exists there, a file otherwise.
	JournalDir bool
	// Follow makes the start follow the journal (FollowFile, FollowJournal) until ctx ends; without
	// it the start applies the journal to its end (ApplyFile, ApplyJournal) and returns.
	Follow bool
	// Source, when set, reads the lines in place of the journal file: it applies them to in through
	// h, to the source's end (follow false) or on until ctx ends (follow true), storing its position
	// with the effects as the inbox's sources do. It is how a caller feeds the platform from a
	// stream without this package depending on the broker's client.
	Source func(ctx context.Context, in *inbox.Inbox, h inbox.Handler, follow bool) error
	// Batch, when set, is called after each batch the inbox commits, with that batch's Report.
	Batch func(inbox.Report)
	// PollInterval and BatchLines, when set, are the inbox's (WithPollInterval, WithBatchLines).
	PollInterval time.Duration
	BatchLines   int
}

// PlatformHandlerPoint is the fault point the platform's handler passes for each line, before it
// writes anything: a crash there is a crash inside a handler, in the inbox's open transaction.
const PlatformHandlerPoint = "demo.platform.handler"

// The platform's tables. None has a key on (run, seq) or on the unit, so that a line applied twice,
// or a unit announced twice, would show as a second row instead of being absorbed by a constraint:
// the inbox alone keeps them single, and CheckPlatform counts the rows.
const platformSchema = `
CREATE TABLE IF NOT EXISTS platform_effects (run TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS platform_units (unit INTEGER NOT NULL, run TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS platform_spend (unit INTEGER NOT NULL, cents INTEGER NOT NULL, run TEXT NOT NULL, seq INTEGER NOT NULL);`

// RunPlatform performs one start of the platform: open its inbox, create its tables, then apply the
// journal (to its end, or following it until ctx ends). A start that follows returns nil when ctx
// ends: everything it applied is committed. A crash anywhere costs nothing: the next start goes on
// from the position the inbox committed with the effects.
func RunPlatform(ctx context.Context, cfg PlatformConfig) (err error) {
	// A follower told to stop while it opens has applied nothing: that is a stop, not a failure.
	defer func() {
		if cfg.Follow && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = nil
		}
	}()
	var opts []inbox.Option
	if cfg.Batch != nil {
		batch := cfg.Batch
		opts = append(opts, inbox.WithBatchHook(func(_ string, r inbox.Report) { batch(r) }))
	}
	if cfg.PollInterval > 0 {
		opts = append(opts, inbox.WithPollInterval(cfg.PollInterval))
	}
	if cfg.BatchLines > 0 {
		opts = append(opts, inbox.WithBatchLines(cfg.BatchLines))
	}
	in, err := inbox.Open(ctx, cfg.DB, opts...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, platformSchema)
		return err
	}); err != nil {
		return fmt.Errorf("demo: platform schema: %w", err)
	}
	if cfg.Source != nil {
		return cfg.Source(ctx, in, applyLine, cfg.Follow)
	}
	if st, err := os.Stat(cfg.Journal); cfg.JournalDir || (err == nil && st.IsDir()) {
		if !cfg.Follow {
			_, err := in.ApplyJournal(ctx, cfg.Journal, applyLine)
			return err
		}
		return in.FollowJournal(ctx, cfg.Journal, applyLine)
	}
	if !cfg.Follow {
		_, err := in.ApplyFile(ctx, cfg.Journal, applyLine)
		return err
	}
	return in.FollowFile(ctx, cfg.Journal, applyLine)
}

// demoLine is what the platform and the checks read of a journal line.
type demoLine struct {
	Run  string `json:"engine_run_id"`
	Seq  int64  `json:"seq"`
	Type string `json:"type"`
	Data struct {
		Unit   int   `json:"unit"`
		Amount int64 `json:"amount"`
	} `json:"data"`
}

// applyLine is the platform's handler: a row per line, a row per unit done, a row per spend, all in
// the inbox's transaction.
func applyLine(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
	faultpoint.Hit(PlatformHandlerPoint)
	var l demoLine
	if err := json.Unmarshal(ev.Line, &l); err != nil {
		return fmt.Errorf("demo: platform: read the line: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO platform_effects (run, seq, type) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, l.Type); err != nil {
		return err
	}
	var err error
	switch l.Type {
	case "unit_done":
		_, err = tx.ExecContext(ctx, `INSERT INTO platform_units (unit, run, seq) VALUES (?, ?, ?)`, l.Data.Unit, ev.RunID, ev.Seq)
	case "spend":
		_, err = tx.ExecContext(ctx, `INSERT INTO platform_spend (unit, cents, run, seq) VALUES (?, ?, ?, ?)`,
			l.Data.Unit, l.Data.Amount, ev.RunID, ev.Seq)
	}
	return err
}
