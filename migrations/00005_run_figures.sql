-- +goose Up
-- One row per run, with the figures that listing the book needs, kept current by the statements that
-- change them, so that recovery, stats and metrics read a row per run instead of grouping every
-- stored row (about 1 us a row: seconds at 10^6 ledger keys, past a scrape's deadline at 10^7).
--   last_seq:  the highest seq the run was given. Seqs are dense from 1, so it is also the number of
--              lines ever enqueued to the run: a counter that never goes down.
--   projected: every seq up to it is in the sink (outbox_progress.projected, copied by its triggers);
--              likewise the number of lines ever projected.
--   forgotten: every row up to this seq that holds no once key is gone. The relay forgets as it
--              records, and recovery forgets in bounded steps from here up to projected, so a crash
--              in the middle leaves it where the last step committed.
--   lines:     rows still stored, ledger rows included.
--   ledger_lines: stored rows whose once key is in the ledger.
-- The counts carry no CHECK: a caller's trigger that fails an insert before the one that counts it
-- runs leaves them one short until the store takes them again from the rows (RunUndoInsert), and the
-- delete in between must not fail on it.
-- A run keeps its row for the life of the book, like its progress row: one small row per run.
CREATE TABLE outbox_runs (
    engine_run_id TEXT    NOT NULL PRIMARY KEY CHECK (engine_run_id <> ''),
    last_seq      INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    projected     INTEGER NOT NULL DEFAULT 0 CHECK (projected >= 0),
    forgotten     INTEGER NOT NULL DEFAULT 0 CHECK (forgotten >= 0),
    lines         INTEGER NOT NULL DEFAULT 0,
    ledger_lines  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The runs recovery visits: rows stored and either lines not yet projected (a run a relay stopped on
-- has those too) or projected rows not yet forgotten. A query must repeat this WHERE literally for the
-- planner to use the index. Every other run is finished and costs a start nothing.
CREATE INDEX outbox_runs_open ON outbox_runs (engine_run_id)
WHERE lines > 0 AND (last_seq > projected OR projected > forgotten);

-- The hot path: every enqueue passes here. A run's row is made by a BEFORE trigger, which SQLite runs
-- before every AFTER trigger, only when it is missing (a read of the primary key), and the AFTER
-- trigger is one UPDATE: measured, an INSERT ... WHERE NOT EXISTS in the AFTER trigger cost twice as
-- much per row.
-- +goose StatementBegin
CREATE TRIGGER outbox_runs_new BEFORE INSERT ON events_outbox
WHEN NOT EXISTS (SELECT 1 FROM outbox_runs WHERE engine_run_id = NEW.engine_run_id)
BEGIN
    INSERT INTO outbox_runs (engine_run_id) VALUES (NEW.engine_run_id);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_insert AFTER INSERT ON events_outbox
BEGIN
    UPDATE outbox_runs
    SET last_seq = max(last_seq, NEW.seq), lines = lines + 1, ledger_lines = ledger_lines + (NEW.once_key <> '')
    WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_delete AFTER DELETE ON events_outbox
BEGIN
    UPDATE outbox_runs SET lines = lines - 1, ledger_lines = ledger_lines - (OLD.once_key <> '')
    WHERE engine_run_id = OLD.engine_run_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_ledger AFTER UPDATE OF once_key ON events_outbox
WHEN (OLD.once_key <> '') <> (NEW.once_key <> '')
BEGIN
    UPDATE outbox_runs SET ledger_lines = ledger_lines + (NEW.once_key <> '') - (OLD.once_key <> '')
    WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_progress_insert AFTER INSERT ON outbox_progress
BEGIN
    INSERT INTO outbox_runs (engine_run_id)
    SELECT NEW.engine_run_id WHERE NOT EXISTS (SELECT 1 FROM outbox_runs WHERE engine_run_id = NEW.engine_run_id);
    UPDATE outbox_runs
    SET last_seq = max(last_seq, NEW.last_seq, NEW.projected), projected = max(projected, NEW.projected)
    WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_progress_update AFTER UPDATE ON outbox_progress
BEGIN
    INSERT INTO outbox_runs (engine_run_id)
    SELECT NEW.engine_run_id WHERE NOT EXISTS (SELECT 1 FROM outbox_runs WHERE engine_run_id = NEW.engine_run_id);
    UPDATE outbox_runs
    SET last_seq = max(last_seq, NEW.last_seq, NEW.projected), projected = max(projected, NEW.projected)
    WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- Filled from what the book holds: one pass over the stored rows, grouped by run, and the progress
-- rows. forgotten starts below the run's first stored row without a once key (or at projected when
-- there is none), so recovery's first pass forgets from there instead of from seq 1.
INSERT INTO outbox_runs (engine_run_id, last_seq, projected, forgotten, lines, ledger_lines)
SELECT r.engine_run_id,
       max(r.last_seq, COALESCE(p.last_seq, 0), COALESCE(p.projected, 0)),
       COALESCE(p.projected, 0),
       min(COALESCE(p.projected, 0), COALESCE(r.first_buffered - 1, COALESCE(p.projected, 0))),
       r.lines,
       r.ledger_lines
FROM (
    SELECT engine_run_id, MAX(seq) AS last_seq, count(*) AS lines, SUM(once_key <> '') AS ledger_lines,
           MIN(CASE WHEN once_key = '' THEN seq END) AS first_buffered
    FROM events_outbox
    GROUP BY engine_run_id
) AS r
LEFT JOIN outbox_progress AS p ON p.engine_run_id = r.engine_run_id;

INSERT INTO outbox_runs (engine_run_id, last_seq, projected, forgotten)
SELECT engine_run_id, max(last_seq, projected), projected, projected
FROM outbox_progress
WHERE engine_run_id NOT IN (SELECT engine_run_id FROM outbox_runs);

-- +goose Down
-- Nothing else refers to the table: the figures are rebuilt from the rows by the next migration up.
-- The highest seq of a run whose rows are forgotten stays in outbox_progress.last_seq, where the
-- relay records it before it forgets.
DROP TRIGGER outbox_runs_progress_update;
DROP TRIGGER outbox_runs_progress_insert;
DROP TRIGGER outbox_runs_ledger;
DROP TRIGGER outbox_runs_delete;
DROP TRIGGER outbox_runs_insert;
DROP TRIGGER outbox_runs_new;
DROP INDEX outbox_runs_open;
DROP TABLE outbox_runs;
