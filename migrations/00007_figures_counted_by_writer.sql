-- +goose Up
-- The store counts its own inserts: it adds each transaction's lines to each run's figures row once,
-- before it commits (outbox/figures.go), instead of a trigger updating the row once per inserted line.
-- Measured, the per-line triggers cost an enqueue at synchronous=FULL about 30%, at NORMAL about 80%,
-- and a batch of 100 about a third of its rate (docs/BENCHMARKS.md).
--
-- counted: 1 on a row whose writer counted it in outbox_runs itself (the store's EventInsert); 0 on a
-- row inserted by anything else (the sqlite3 shell, a program of the operator's, an older release),
-- which the insert trigger below still counts, so the figures stay exact whoever writes. The value
-- means something only at the insert; a row keeps it as written. The column costs a row one byte of
-- record header and no payload (SQLite stores the integers 0 and 1 in the header alone).
ALTER TABLE events_outbox ADD COLUMN counted INTEGER NOT NULL DEFAULT 0;

-- counted_to: the highest seq of the run's counted rows that the store has added to lines. A counted
-- row above it is the current transaction's, not yet added: the store adds the ones still stored when
-- it commits, read from the rows themselves (RunAddLines), so that a row the transaction took out
-- again, by a DELETE or by rolling back to a savepoint, is never added; and the delete trigger leaves
-- such a row out of lines, which never held it.
ALTER TABLE outbox_runs ADD COLUMN counted_to INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER outbox_runs_new;
DROP TRIGGER outbox_runs_insert;
DROP TRIGGER outbox_runs_delete;
DROP TRIGGER outbox_runs_ledger;

-- One trigger, run for every insert, whose WHEN is all a counted row costs: measured natively
-- (300,000 rows in one statement), about 0.3 us a row, where the BEFORE and AFTER pair it replaces
-- cost 1.3 us. A row inserted by another writer is counted by an upsert here: rare, so its cost
-- does not matter.
-- +goose StatementBegin
CREATE TRIGGER outbox_runs_insert AFTER INSERT ON events_outbox
WHEN NEW.counted = 0
BEGIN
    INSERT INTO outbox_runs (engine_run_id, last_seq, lines, ledger_lines)
    VALUES (NEW.engine_run_id, NEW.seq, 1, NEW.once_key <> '')
    ON CONFLICT (engine_run_id) DO UPDATE
    SET last_seq = max(last_seq, NEW.seq), lines = lines + 1, ledger_lines = ledger_lines + (NEW.once_key <> '');
END;
-- +goose StatementEnd

-- Deletes and ledger changes stay with triggers: every writer's, the store's included (the relay's
-- forgetting, recovery, ForgetEvents, a caller's own statements inside WriteTx). A delete takes a row
-- from lines only when lines held it: a row of another writer's, or a counted row up to counted_to; a
-- counted row above it is the store's current transaction's, not added yet (see counted_to). A ledger
-- key is counted as it changes, whoever's row holds it, so a delete always takes it. They are upserts
-- because inside a transaction of the store's a run's figures row may not exist yet (a caller's
-- statement inside WriteTx on a line enqueued to a new run in it); the row it makes then holds a
-- negative count until the store's addition brings it back.
-- +goose StatementBegin
CREATE TRIGGER outbox_runs_delete AFTER DELETE ON events_outbox
BEGIN
    INSERT INTO outbox_runs (engine_run_id, lines, ledger_lines)
    VALUES (OLD.engine_run_id, -(OLD.counted = 0), -(OLD.once_key <> ''))
    ON CONFLICT (engine_run_id) DO UPDATE
    SET lines = lines - (OLD.counted = 0 OR OLD.seq <= counted_to), ledger_lines = ledger_lines - (OLD.once_key <> '');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_ledger AFTER UPDATE OF once_key ON events_outbox
WHEN (OLD.once_key <> '') <> (NEW.once_key <> '')
BEGIN
    INSERT INTO outbox_runs (engine_run_id, ledger_lines)
    VALUES (NEW.engine_run_id, (NEW.once_key <> '') - (OLD.once_key <> ''))
    ON CONFLICT (engine_run_id) DO UPDATE
    SET ledger_lines = ledger_lines + (NEW.once_key <> '') - (OLD.once_key <> '');
END;
-- +goose StatementEnd

-- +goose Down
-- The figures are exact at this point, whoever wrote the rows: the triggers of version 5 take over
-- from them, counting every insert again.
DROP TRIGGER outbox_runs_ledger;
DROP TRIGGER outbox_runs_delete;
DROP TRIGGER outbox_runs_insert;

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

ALTER TABLE outbox_runs DROP COLUMN counted_to;
ALTER TABLE events_outbox DROP COLUMN counted;
