-- +goose Up
-- last_seq: the highest seq a run was given, recorded when its rows are forgotten. A run's next seq
-- follows the higher of this and its highest stored row, so a run whose rows were dropped never reuses
-- a number: the reader would take the second line under a seq it already has as a conflict. A run's
-- progress row is kept for the life of the book from then on, one small row per run.
ALTER TABLE outbox_progress ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0);
-- A book migrated down past this version lost what it recorded here. A run was given at least every
-- seq it projected, so its position is the highest seq it can be proved to have reached: a run
-- forgotten up to its position then never gives those numbers again.
UPDATE outbox_progress SET last_seq = projected WHERE projected > 0;

-- Large lines live outside the clustered table. events_outbox is WITHOUT ROWID, so its b-tree holds
-- whole rows, in interior pages too, and SQLite reads a cell that overflows its page whole to compare
-- keys: with a 32 MiB line in a run, every later insert and next-seq lookup of that run read 32 MiB
-- (p99 15 ms instead of 0.1 ms), and a few such lines could exhaust a connection's memory. A line of
-- spillOver bytes or more (outbox/events.go) is stored here instead, keyed by rowid, and its row holds
-- an empty line and the rowid in spill; the trigger drops it with its row.
CREATE TABLE events_lines (
    id   INTEGER PRIMARY KEY,
    line BLOB    NOT NULL
);
ALTER TABLE events_outbox ADD COLUMN spill INTEGER NOT NULL DEFAULT 0;
-- +goose StatementBegin
CREATE TRIGGER events_outbox_spill_delete AFTER DELETE ON events_outbox
WHEN OLD.spill <> 0
BEGIN
    DELETE FROM events_lines WHERE id = OLD.spill;
END;
-- +goose StatementEnd

-- +goose Down
UPDATE events_outbox
SET line = (SELECT events_lines.line FROM events_lines WHERE events_lines.id = events_outbox.spill), spill = 0
WHERE spill <> 0;
DROP TRIGGER events_outbox_spill_delete;
ALTER TABLE events_outbox DROP COLUMN spill;
DROP TABLE events_lines;
ALTER TABLE outbox_progress DROP COLUMN last_seq;
