-- +goose Up
-- A run whose projection stopped because the sink refused one of its lines (a line the sink can never
-- take: not keyed by its own run and seq, a gap, another line under the same key). The relay records
-- the refusal here, at the first seq of the batch it refused and why, so that stats and metrics show
-- the run as stopped after the process that met it has exited; the record goes when the run
-- projects again (after Store.RetireEvent replaced the line, say). One small row per stopped run.
CREATE TABLE outbox_stops (
    engine_run_id TEXT    NOT NULL PRIMARY KEY CHECK (engine_run_id <> ''),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    reason        TEXT    NOT NULL,
    stopped_at    INTEGER NOT NULL -- unix milliseconds
) WITHOUT ROWID;

-- +goose Down
DROP TABLE outbox_stops;
