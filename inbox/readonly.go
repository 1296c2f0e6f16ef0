// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/textmachine/outbox/inbox/internal/db"
	"github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/litedb"
)

// OpenReadOnly opens an existing inbox database for reading only, for the tools that watch a
// consumer: Position, Quarantined, Sources, SourcePosition, AcceptedGaps, AllRuns and RunCount
// work; every write returns ErrReadOnly before it begins (ApplyFile and FollowFile at their first
// batch to commit: FollowFile on a file with nothing to read waits as it always does). It takes no
// lock that an Inbox would meet: beside a running consumer (an Inbox open, FollowFile running) it
// reads what the consumer has committed, through its WAL. On a database that no Inbox holds open it writes nothing and creates no file beside it (no
// -wal, no -shm), so it also works where the caller cannot write. It reads the database the way
// outbox.OpenReadOnlyDB reads a book, with the same failure model: a read that meets a consumer
// opening the database meanwhile fails with an error wrapping outbox.ErrBookOpened (the same error
// value as ErrDatabaseOpened), and the same read again succeeds.
//
// It refuses a path that names no file, a database with no inbox's tables (ErrNotInbox), a book
// (ErrOutboxDatabase), and an inbox schema newer than this release (migrations.ErrSchemaMismatch).
// Of the options, WithBusyTimeout, WithReadPoolSize, WithVFS and WithLogger apply; the others are
// accepted and have nothing to do.
func OpenReadOnly(ctx context.Context, path string, opts ...Option) (*Inbox, error) {
	if path == "" {
		return nil, errors.New("inbox: empty database path")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	in := &Inbox{path: path, cfg: cfg, q: db.New(), w: sql.OpenDB(readOnlyConnector{}), writer: make(chan struct{}, 1)}
	r, err := litedb.OpenReadOnly(ctx, path, in.dbConfig())
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	version, err := checkInboxSchema(ctx, r)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	in.r, in.unmarked, in.uncounted = r, version < rewoundMarkVersion, version < countersVersion
	cfg.logger.Debug("inbox: opened read-only", "path", path)
	return in, nil
}

// rewoundMarkVersion is the inbox schema version that keeps a rewound source's position.
const rewoundMarkVersion = 3

// checkInboxSchema refuses a database that is not an inbox's, or is one of a newer release, and
// returns its version.
func checkInboxSchema(ctx context.Context, r *sql.DB) (int64, error) {
	var inbox, book int
	err := r.QueryRowContext(ctx, `SELECT
		count(*) FILTER (WHERE name IN (?, 'inbox_runs', 'inbox_quarantine', 'inbox_sources')),
		count(*) FILTER (WHERE name IN ('events_outbox', 'outbox_progress', ?))
		FROM sqlite_schema WHERE type = 'table'`, migrations.TableName, outboxVersionTable).Scan(&inbox, &book)
	switch {
	case err != nil:
		return 0, err
	case book > 0:
		return 0, fmt.Errorf("%w: it is a book, not a consumer's database", ErrOutboxDatabase)
	case inbox < 4:
		return 0, ErrNotInbox
	}
	var version int64
	if err := r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version_id), 0) FROM `+migrations.TableName+
		` WHERE is_applied`).Scan(&version); err != nil {
		return 0, fmt.Errorf("read the inbox's version: %w", err)
	}
	if latest := migrations.Latest(); version > latest {
		return 0, fmt.Errorf("%w: the database is at version %d, this release knows up to %d",
			migrations.ErrSchemaMismatch, version, latest)
	}
	return version, nil
}

// readOnlyConnector is the writer of a read-only Inbox: the write path asks it for the writer
// connection before it does anything, and is refused with ErrReadOnly.
type readOnlyConnector struct{}

func (readOnlyConnector) Connect(context.Context) (driver.Conn, error) { return nil, ErrReadOnly }
func (readOnlyConnector) Driver() driver.Driver                        { return readOnlyDriver{} }

type readOnlyDriver struct{}

func (readOnlyDriver) Open(string) (driver.Conn, error) { return nil, ErrReadOnly }

// AllRuns yields every run the inbox holds a high-water mark for (every run it applied a line of),
// in run id order, one page at a time on the read pool, so that memory stays bounded however many
// runs there are. A run quarantined before it applied any line has no high-water mark and is listed
// by Quarantined only. An error ends the sequence.
func (in *Inbox) AllRuns(ctx context.Context) iter.Seq2[Run, error] {
	return func(yield func(Run, error) bool) {
		after := ""
		for {
			var rows []db.RunsAfterRow
			err := in.read(ctx, func() (err error) {
				rows, err = in.q.RunsAfter(ctx, in.r, db.RunsAfterParams{After: after, MaxRows: pageRows})
				return err
			})
			if err != nil {
				yield(Run{}, wrapf(err, "list the runs"))
				return
			}
			for _, r := range rows {
				if !yield(Run{RunID: r.EngineRunID, Position: r.Hwm, LastApply: time.Unix(0, r.AppliedAt)}, nil) {
					return
				}
			}
			if len(rows) < pageRows {
				return
			}
			after = rows[len(rows)-1].EngineRunID
		}
	}
}

// RunCount returns how many runs the inbox holds a high-water mark for.
func (in *Inbox) RunCount(ctx context.Context) (int64, error) {
	var n int64
	err := in.read(ctx, func() (err error) {
		n, err = in.q.RunsCount(ctx, in.r)
		return err
	})
	if err != nil {
		return 0, wrapf(err, "count the runs")
	}
	return n, nil
}
