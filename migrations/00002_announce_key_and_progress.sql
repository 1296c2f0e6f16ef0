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

-- +goose Down
DROP TABLE outbox_progress;
DROP INDEX events_outbox_announce_key;
ALTER TABLE events_outbox DROP COLUMN enqueued_at;
ALTER TABLE events_outbox DROP COLUMN announce_key;
