-- +goose Up
-- last_seq: the highest seq a run was given, recorded when its rows are forgotten. A run's next seq
-- follows the higher of this and its highest stored row, so a run whose rows were dropped never reuses
-- a number: the reader would take the second line under a seq it already has as a conflict. A run's
-- progress row is kept for the life of the book from then on, one small row per run.
ALTER TABLE outbox_progress ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0);

-- +goose Down
ALTER TABLE outbox_progress DROP COLUMN last_seq;
