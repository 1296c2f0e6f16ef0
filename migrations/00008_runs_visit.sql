-- +goose Up
-- The runs recovery visits are marked by a column of their own, visit, which an enqueue to a run
-- already marked does not write. The partial index of version 5 named lines and last_seq in its
-- WHERE, so SQLite deleted and re-inserted the run's entry on every update of them: every enqueue
-- commit and every relay record wrote a page of the index beside the run's row (measured: 3.58 WAL
-- frames a commit of one event, against 1.54 before the figures; docs/BENCHMARKS.md).
--
-- visit: 1 while recovery may have work on the run. The triggers below set it in the statement that
-- makes the run need recovery (rows stored and either lines not projected or projected rows not
-- forgotten), whoever writes the figures: the store's count at commit, another writer's insert, the
-- relay's record. Only recovery clears it, for a run it finds finished, in a statement that checks
-- exactly that (RunsCloseFinished): so a run that needs recovery is marked at every commit, and a
-- crash between any two steps leaves it marked. A run finished by the relay's own forgetting stays
-- marked until the next recovery clears it: the mark is a superset, the queries repeat the finished
-- test after it.
ALTER TABLE outbox_runs ADD COLUMN visit INTEGER NOT NULL DEFAULT 0;

UPDATE outbox_runs SET visit = 1
WHERE lines > 0 AND (last_seq > projected OR projected > forgotten);

DROP INDEX outbox_runs_open;

-- A query must repeat this WHERE literally for the planner to use the index.
CREATE INDEX outbox_runs_open ON outbox_runs (engine_run_id) WHERE visit = 1;

-- On the hot path (a marked run) the WHEN fails at its first term and nothing is written: an UPDATE
-- whose SET leaves out visit does not touch the index.
-- +goose StatementBegin
CREATE TRIGGER outbox_runs_visit_insert AFTER INSERT ON outbox_runs
WHEN NEW.visit = 0 AND NEW.lines > 0 AND (NEW.last_seq > NEW.projected OR NEW.projected > NEW.forgotten)
BEGIN
    UPDATE outbox_runs SET visit = 1 WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- visit is in the list too, so that a statement clearing it from a run that needs recovery is undone.
-- +goose StatementBegin
CREATE TRIGGER outbox_runs_visit AFTER UPDATE OF visit, lines, last_seq, projected, forgotten ON outbox_runs
WHEN NEW.visit = 0 AND NEW.lines > 0 AND (NEW.last_seq > NEW.projected OR NEW.projected > NEW.forgotten)
BEGIN
    UPDATE outbox_runs SET visit = 1 WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- +goose Down
-- The index of version 5 holds exactly the runs that need recovery, computed from the figures, which
-- this version does not change.
DROP TRIGGER outbox_runs_visit;
DROP TRIGGER outbox_runs_visit_insert;
DROP INDEX outbox_runs_open;
ALTER TABLE outbox_runs DROP COLUMN visit;
CREATE INDEX outbox_runs_open ON outbox_runs (engine_run_id)
WHERE lines > 0 AND (last_seq > projected OR projected > forgotten);
