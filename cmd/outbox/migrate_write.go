// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"
	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/flock"
	"github.com/textmachine/outbox/migrations"
)

// migrateWrite applies or rolls back migrations under the book's writer lock.
func migrateWrite(ctx context.Context, path, action string, force bool, stdout io.Writer) error {
	if err := checkFile(path, "database"); err != nil && !(action == "up" && missing(path)) {
		return err
	}
	if !missing(path) {
		// The consumer's database is the other SQLite file beside a book: the outbox's tables added
		// to it make the inbox refuse it as a book, and the consumer could not start again.
		if in, err := inbox.OpenReadOnly(ctx, path); err == nil {
			in.Close()
			return fmt.Errorf("database %s is a consumer's database (it holds an inbox), not a book; nothing was changed", quote(path))
		}
	}
	lock, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := flock.Exclusive(lock); err != nil {
		lock.Close()
		if errors.Is(err, flock.ErrHeld) {
			return &heldError{path, "a running engine",
				fmt.Sprintf("database %s is held by a running engine; stop it first", quote(path))}
		}
		return err
	}
	defer flock.Release(lock)
	// The path taken literally: never pasted into a URI, where "?", "#" or "%41" would mean
	// something else.
	u := url.URL{Scheme: "file", OmitHost: true, Path: path}
	d, err := driver.Open(u.String(), func(c *sqlite3.Conn) error {
		if err := c.BusyTimeout(5 * time.Second); err != nil {
			return err
		}
		return c.Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL")
	})
	if err != nil {
		return err
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	err = migrateLocked(ctx, d, action, force, stdout)
	var loss *lossError
	if err != nil && !errors.As(err, &loss) {
		return fmt.Errorf("%s: %w", quote(path), err)
	}
	return err
}

// migrateLocked applies or rolls back migrations on d, whose writer lock is held.
func migrateLocked(ctx context.Context, d *sql.DB, action string, force bool, stdout io.Writer) error {
	p, err := migrations.NewProvider(d)
	if err != nil {
		return err
	}
	// A book migrated by a newer release is not this release's to change, up or down.
	if unknown, err := migrations.Unknown(ctx, d); err != nil || len(unknown) > 0 {
		if err == nil {
			err = fmt.Errorf("%w: the database is at version %d, which this release does not know: use the release that migrated it",
				migrations.ErrSchemaMismatch, unknown[len(unknown)-1])
		}
		return err
	}
	if action == "up" {
		if err := migrations.IncrementalIfEmpty(ctx, d); err != nil {
			return err
		}
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(stdout, "applied %s\n", r.Source.Path)
		}
		if err != nil {
			return err
		}
		if len(res) == 0 {
			v, err := p.GetDBVersion(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "nothing to apply: the database is at version %d, the latest\n", v)
		}
		// Up to date by its version table, but a table, column or index dropped by hand is still
		// missing: say so rather than "nothing to do".
		return migrations.Check(ctx, d)
	}
	if !force {
		if err := checkLoss(ctx, d, p); err != nil {
			return err
		}
	}
	r, err := p.Down(ctx)
	if r != nil && err == nil {
		fmt.Fprintf(stdout, "rolled back %s\n", r.Source.Path)
	}
	return err
}

func missing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist)
}

// lossError is a rollback refused because it would destroy data.
type lossError struct {
	version int64
	what    string
}

func (e *lossError) Error() string {
	return fmt.Sprintf("rolling back version %d would drop %s; nothing was changed (give --force to roll back anyway)", e.version, e.what)
}

// positionsLost counts the runs whose projected position is higher than the one migration 00002's
// up step rebuilds from the rows (its query, kept in step with it), and the stored lines between
// the two, which recovery would send again.
const positionsLost = `WITH shown AS (
	SELECT engine_run_id, MAX(shown) AS projected
	FROM (
		SELECT engine_run_id,
		       CASE WHEN once_key <> '' THEN seq
		            WHEN seq - 1 > COALESCE(LAG(seq) OVER (PARTITION BY engine_run_id ORDER BY seq), 0) THEN seq - 1
		            ELSE 0 END AS shown
		FROM events_outbox
	)
	GROUP BY engine_run_id
)
SELECT count(*), COALESCE(SUM((SELECT count(*) FROM events_outbox AS e
	WHERE e.engine_run_id = p.engine_run_id AND e.seq > COALESCE(s.projected, 0) AND e.seq <= p.projected)), 0)
FROM outbox_progress AS p LEFT JOIN shown AS s ON s.engine_run_id = p.engine_run_id
WHERE p.projected > COALESCE(s.projected, 0)`

// checkLoss refuses rolling back the book's current version when that drops stored events or once
// keys: version 1 drops the table of events and the ledger with it; version 2 drops the once keys of
// lines not yet projected, which would then never reach the ledger, and the positions the relay
// recorded, of which migrating up again rebuilds only what the rows prove; version 3 drops the
// record of how far forgotten runs went; version 4 drops the record of runs whose projection
// stopped on the sink's refusal; version 6 drops the digests of the projected once-keyed lines whose
// bytes the book no longer keeps.
func checkLoss(ctx context.Context, d *sql.DB, p interface {
	GetDBVersion(context.Context) (int64, error)
}) error {
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	count := func(query string) (int64, error) {
		var n int64
		err := d.QueryRowContext(ctx, query).Scan(&n)
		return n, err
	}
	switch v {
	case 1:
		events, err := count(`SELECT count(*) FROM events_outbox`)
		if err != nil {
			return err
		}
		keys, err := count(`SELECT count(*) FROM events_outbox WHERE once_key <> ''`)
		if err != nil {
			return err
		}
		if events > 0 {
			return &lossError{v, fmt.Sprintf("%s, %s", plural(events, "stored event"), ofThem(keys, "a once key in the ledger", "once keys in the ledger"))}
		}
	case 2:
		keys, err := count(`SELECT count(*) FROM events_outbox WHERE announce_key <> '' AND once_key = ''`)
		if err != nil {
			return err
		}
		var lost []string
		if keys > 0 {
			lost = append(lost, fmt.Sprintf("the once keys of %s not yet projected", plural(keys, "event")))
		}
		var runs, resent int64
		if err := d.QueryRowContext(ctx, positionsLost).Scan(&runs, &resent); err != nil {
			return err
		}
		if runs > 0 {
			lost = append(lost, fmt.Sprintf("the projected positions of %s, beyond what their rows show: "+
				"%s the sink has would be sent to it again, and a run whose last lines were "+
				"forgotten could give their seqs again", plural(runs, "run"), plural(resent, "stored line")))
		}
		if len(lost) > 0 {
			return &lossError{v, strings.Join(lost, ", and ")}
		}
	case 3:
		// Without last_seq, a run whose rows were forgotten starts again below its highest seq.
		runs, err := count(`SELECT count(*) FROM outbox_progress AS p WHERE last_seq >
			(SELECT COALESCE(MAX(seq), 0) FROM events_outbox AS e WHERE e.engine_run_id = p.engine_run_id)`)
		if err != nil {
			return err
		}
		if runs > 0 {
			return &lossError{v, fmt.Sprintf("the highest seq of %s whose lines were forgotten, so their next events would reuse numbers", plural(runs, "run"))}
		}
	case 4:
		runs, err := count(`SELECT count(*) FROM outbox_stops`)
		if err != nil {
			return err
		}
		if runs > 0 {
			return &lossError{v, fmt.Sprintf("the record of %s whose projection stopped on the sink's refusal", plural(runs, "run"))}
		}
	case 6:
		// The lines are in the journal only; the down step keeps their keys and drops their digests.
		lines, err := count(`SELECT count(*) FROM events_outbox WHERE once_key <> '' AND length(digest) > 0`)
		if err != nil {
			return err
		}
		if lines > 0 {
			return &lossError{v, fmt.Sprintf("the digests of %s whose bytes the book no longer keeps (their once keys stay): "+
				"an older release's outbox check reports each as differing from the journal", plural(lines, "projected once-keyed line"))}
		}
	}
	return nil
}
