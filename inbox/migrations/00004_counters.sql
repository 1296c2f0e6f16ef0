-- +goose Up
-- What the inbox has done with the lines it was given, counted since this migration: one row, added
-- to in the transaction that applies the lines, so that the counts commit with the lines' effects,
-- survive restarts and never go down (a rolled-back call counts nothing). Exporters read them as
-- counters (outbox_inbox_lines_applied_total and the others); a row per run would grow with the runs.
CREATE TABLE inbox_counters (
    id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    applied     INTEGER NOT NULL DEFAULT 0 CHECK (applied >= 0),
    duplicates  INTEGER NOT NULL DEFAULT 0 CHECK (duplicates >= 0),
    stale       INTEGER NOT NULL DEFAULT 0 CHECK (stale >= 0),
    quarantined INTEGER NOT NULL DEFAULT 0 CHECK (quarantined >= 0)
);

INSERT INTO inbox_counters (id) VALUES (1);

-- +goose Down
-- The release before this version keeps no counts: they are given up.
DROP TABLE inbox_counters;
