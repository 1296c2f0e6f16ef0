-- +goose Up
-- announce_key: the once key, stored when EnqueueOnce enqueues. It makes the key known while the line
-- is still pending, so a crash between enqueue and the journal no longer loses which key the line
-- announces: recovery projects the line and moves the key into the ledger (once_key) itself. Its own
-- partial unique index gives one row per key for the life of the book.
ALTER TABLE events_outbox ADD COLUMN announce_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX events_outbox_announce_key ON events_outbox (announce_key) WHERE announce_key <> '';

-- enqueued_at: unix milliseconds at enqueue, for the age of the oldest unprojected line. Rows from
-- before this migration read 0 (unknown).
ALTER TABLE events_outbox ADD COLUMN enqueued_at INTEGER NOT NULL DEFAULT 0;

-- How far the relay has projected each run: every line with seq <= projected is in the journal. It is
-- written in the transaction that marks the batch's once keys, after the journal has the batch, so a
-- restart re-sends at most the one batch that was in flight.
CREATE TABLE outbox_progress (
    engine_run_id TEXT    NOT NULL PRIMARY KEY CHECK (engine_run_id <> ''),
    projected     INTEGER NOT NULL CHECK (projected >= 0)
) WITHOUT ROWID;

-- A book migrated down past this version lost its positions with the table. Rebuild, for each run,
-- the position its rows prove, and no further: a row gone below a stored one was forgotten, which
-- happens only once it is projected; a row in the ledger is in the journal; and the journal holds a
-- run's lines densely, so everything before either is projected too. The lines after the position
-- are sent again, byte for byte, and the sink checks each against what it holds: a copy it has is
-- a duplicate the reader skips, a line whose predecessor it lacks is refused. A book that never had
-- the table gets the positions its rows prove the same way.
INSERT INTO outbox_progress (engine_run_id, projected)
SELECT engine_run_id, MAX(shown)
FROM (
    SELECT engine_run_id,
           CASE WHEN once_key <> '' THEN seq
                WHEN seq - 1 > COALESCE(LAG(seq) OVER (PARTITION BY engine_run_id ORDER BY seq), 0) THEN seq - 1
                ELSE 0 END AS shown
    FROM events_outbox
)
GROUP BY engine_run_id
HAVING MAX(shown) > 0;

-- +goose Down
DROP TABLE outbox_progress;
DROP INDEX events_outbox_announce_key;
ALTER TABLE events_outbox DROP COLUMN enqueued_at;
ALTER TABLE events_outbox DROP COLUMN announce_key;
