// SPDX-License-Identifier: Apache-2.0

// Package demo simulates the engine that the outbox serves: a book of units worked one transaction at a
// time, each unit's spend recorded with its event, each finished unit announced once. The outbox
// command's demo and the crash tests run it in child processes that are killed at chosen moments, and
// check what it leaves behind with Check.
package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// EngineConfig describes one start of the engine.
type EngineConfig struct {
	DB      string // the book's database
	Journal string // the journal: a directory of segments (journal.Open), or a single file (journal.OpenFile)
	// SegmentSize, when set, is the journal directory's segment size (journal.WithSegmentSize), so
	// that a short book fills several segments. With it, Journal is always a directory; without it,
	// Journal is a directory when one exists there.
	SegmentSize int64
	Units       int    // the book's size
	RunID       string // fresh for every start
	// Committed, when set, is a file the engine appends "run seq" to after each enqueue returns: the
	// events known to be committed, which Check then looks for in the journal.
	Committed string
	// Pace, when set, is slept between units so that a parent can kill the engine mid-book.
	Pace time.Duration
	// Progress, when set, is called after each unit with the number done so far.
	Progress func(done int)
	// BatchSize is the relay's batch size; 0 means the default.
	BatchSize int
	// OpenSink, when set, opens the sink the relay projects to instead of the journal file (a
	// broker, say); the returned function closes it.
	OpenSink func(ctx context.Context) (outbox.Sink, func() error, error)
}

// Cents is the spend of a unit: deterministic, so a check can recompute it.
func Cents(unit int) int64 { return int64(unit*37%1000 + 1) }

const schema = `
CREATE TABLE IF NOT EXISTS units (unit INTEGER PRIMARY KEY, done_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS spend (unit INTEGER PRIMARY KEY, cents INTEGER NOT NULL);`

// RunEngine performs one start: open the store, recover what earlier starts left, write the handshake,
// announce every unit the database says is done, then work the remaining units while a relay projects
// to the journal; finally flush. It returns when the book is done and projected.
func RunEngine(ctx context.Context, cfg EngineConfig) (err error) {
	s, err := outbox.Open(ctx, cfg.DB)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	var sink outbox.Sink
	if cfg.OpenSink != nil {
		var closeSink func() error
		if sink, closeSink, err = cfg.OpenSink(ctx); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, closeSink()) }()
	} else {
		j, err := openJournal(cfg)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, j.Close()) }()
		sink = j
	}
	var committed *os.File
	if cfg.Committed != "" {
		if committed, err = os.OpenFile(cfg.Committed, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			return err
		}
		defer committed.Close()
	}
	note := func(seq int64) {
		if committed != nil && seq > 0 {
			fmt.Fprintf(committed, "%s %d\n", cfg.RunID, seq)
		}
	}

	opts := []outbox.RelayOption{outbox.WithBackoff(time.Millisecond, 100*time.Millisecond)}
	if cfg.BatchSize > 0 {
		opts = append(opts, outbox.WithBatchSize(cfg.BatchSize))
	}
	relay, err := outbox.NewRelay(s, sink, cfg.RunID, opts...)
	if err != nil {
		return err
	}
	if err := relay.Recover(ctx); err != nil {
		return err
	}
	if used, err := s.EventsUsed(ctx, cfg.RunID); err != nil || used {
		return errors.Join(err, fmt.Errorf("demo: run id %q was used before", cfg.RunID))
	}
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, schema)
		return err
	}); err != nil {
		return err
	}
	seq, err := s.EnqueueEvent(ctx, cfg.RunID, journal.Handshake(cfg.RunID, map[string]any{"units": cfg.Units}))
	if err != nil {
		return err
	}
	note(seq)

	done, err := doneUnits(ctx, cfg.DB)
	if err != nil {
		return err
	}
	announced, err := s.AnnouncedOnceKeys(ctx)
	if err != nil {
		return err
	}
	// The ledger, not the units table, decides whether the reader was told: a unit done by a start
	// that died before its announcement reached the journal is announced now.
	for u := range done {
		if err := announce(ctx, s, cfg.RunID, u, announced, note); err != nil {
			return err
		}
	}

	runCtx, cancelRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(runCtx) }()
	stopped := false
	stopRelay := func() error {
		stopped = true
		cancelRelay()
		if err := <-relayDone; !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	defer func() {
		if !stopped {
			err = errors.Join(err, stopRelay())
		}
	}()

	for u := 1; u <= cfg.Units; u++ {
		if done[u] {
			continue
		}
		if err := workUnit(ctx, s, cfg.RunID, u, note); err != nil {
			return err
		}
		if err := announce(ctx, s, cfg.RunID, u, nil, note); err != nil {
			return err
		}
		done[u] = true
		if cfg.Progress != nil {
			cfg.Progress(len(done))
		}
		if cfg.Pace > 0 {
			time.Sleep(cfg.Pace)
		}
	}
	if err := stopRelay(); err != nil {
		return err
	}
	return relay.Flush(ctx)
}

// openJournal opens the engine's journal: the directory when one is asked for or exists, the
// single file otherwise (the crash tests' older layout).
func openJournal(cfg EngineConfig) (interface {
	outbox.Sink
	Close() error
}, error) {
	if st, err := os.Stat(cfg.Journal); cfg.SegmentSize > 0 || (err == nil && st.IsDir()) {
		var opts []journal.Option
		if cfg.SegmentSize > 0 {
			opts = append(opts, journal.WithSegmentSize(cfg.SegmentSize))
		}
		return journal.Open(cfg.Journal, opts...)
	}
	return journal.OpenFile(cfg.Journal)
}

// workUnit is one unit's transaction: mark it done, record its spend, and enqueue the spend event,
// all or nothing.
func workUnit(ctx context.Context, s *outbox.Store, runID string, unit int, note func(int64)) error {
	var seq int64
	err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO units (unit, done_at) VALUES (?, ?)`, unit, time.Now().UnixMilli()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO spend (unit, cents) VALUES (?, ?)`, unit, Cents(unit)); err != nil {
			return err
		}
		var err error
		seq, err = s.EnqueueTx(ctx, tx, runID, journal.Builder(runID, "spend",
			map[string]any{"unit": unit, "amount": Cents(unit)}))
		return err
	})
	if err != nil {
		return fmt.Errorf("demo: work unit %d: %w", unit, err)
	}
	note(seq)
	return nil
}

func announce(ctx context.Context, s *outbox.Store, runID string, unit int, ledger map[string]bool, note func(int64)) error {
	key := "unit_done:" + strconv.Itoa(unit)
	if ledger[key] {
		return nil
	}
	_, seq, err := s.EnqueueOnce(ctx, runID, key, journal.Builder(runID, "unit_done", map[string]any{"unit": unit}))
	if err != nil {
		return fmt.Errorf("demo: announce unit %d: %w", unit, err)
	}
	note(seq)
	return nil
}

func doneUnits(ctx context.Context, path string) (map[int]bool, error) {
	d, err := openRead(ctx, path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	rows, err := d.QueryContext(ctx, `SELECT unit FROM units`)
	if err != nil {
		return nil, fmt.Errorf("demo: read units: %w", err)
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var u int
		if err := rows.Scan(&u); err != nil {
			return nil, err
		}
		out[u] = true
	}
	return out, rows.Err()
}
