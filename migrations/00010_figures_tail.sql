-- +goose Up
-- A run's row of figures holds them as of counted_to; the lines the store enqueued after it, its tail,
-- are counted when the figures are read (the view below), not written into the row at every commit.
-- Writing the row cost every enqueue commit one page of WAL beside the event's own (measured: 2.58
-- frames a commit of one event, against 1.54 before the figures; docs/BENCHMARKS.md).
--
-- The tail: the rows with counted = 1 and seq > counted_to. The store folds it into the row (adds its
-- lines, moves last_seq and counted_to to its highest seq) in a commit that makes a run's row, that
-- enqueues to a run not marked visit, or that would leave a tail of 256 seqs or more; the relay's
-- record folds it at every batch, and forgetting before it deletes, so that the tail stays a few
-- hundred rows at most and a delete never takes a run's highest seq out of its figures. A run with a
-- tail is always marked visit (the fold marks it; only a statement that finds no tail unmarks it), so
-- a reader looks for a tail only on the marked runs: the finished ones cost it nothing.
--
-- Nothing else changes: the delete trigger of migrations/00007 already leaves a counted row above
-- counted_to out of lines, and a ledger key is counted as it changes, whoever's row holds it, so the
-- tail adds lines and last_seq only. last_seq adds the highest stored seq: a tail's rows are stored,
-- and no stored seq is above the run's highest.

-- The figures as every reader reports them: the row's, with its tail added. A query reading them
-- through this view repeats nothing of the tail's definition.
CREATE VIEW outbox_run_figures AS
SELECT r.engine_run_id,
       CAST(CASE WHEN r.visit = 1 THEN max(r.last_seq, COALESCE((
           SELECT MAX(t.seq) FROM events_outbox AS t WHERE t.engine_run_id = r.engine_run_id
       ), 0)) ELSE r.last_seq END AS INTEGER) AS last_seq,
       r.projected,
       r.forgotten,
       CAST(r.lines + CASE WHEN r.visit = 1 THEN (
           SELECT count(*) FROM events_outbox AS t
           WHERE t.engine_run_id = r.engine_run_id AND t.seq > r.counted_to AND t.counted = 1
       ) ELSE 0 END AS INTEGER) AS lines,
       r.ledger_lines,
       r.visit
FROM outbox_runs AS r;

-- The mark is set again on a run whose figures, its tail included, need recovery: a statement that
-- clears it from a run with a tail is undone as one that clears it from a run with lines pending is.
DROP TRIGGER outbox_runs_visit;

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_visit AFTER UPDATE OF visit, lines, last_seq, projected, forgotten ON outbox_runs
WHEN NEW.visit = 0 AND (NEW.lines > 0 AND (NEW.last_seq > NEW.projected OR NEW.projected > NEW.forgotten)
    OR EXISTS (SELECT 1 FROM events_outbox AS t
               WHERE t.engine_run_id = NEW.engine_run_id AND t.seq > NEW.counted_to AND t.counted = 1))
BEGIN
    UPDATE outbox_runs SET visit = 1 WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

-- +goose Down
-- Version 9 reads the rows as exact: every tail is folded into its row first.
UPDATE outbox_runs
SET lines = lines + (SELECT count(*) FROM events_outbox AS t
                     WHERE t.engine_run_id = outbox_runs.engine_run_id AND t.seq > outbox_runs.counted_to AND t.counted = 1),
    last_seq = max(last_seq, COALESCE((SELECT MAX(t.seq) FROM events_outbox AS t
                                       WHERE t.engine_run_id = outbox_runs.engine_run_id AND t.seq > outbox_runs.counted_to AND t.counted = 1), 0)),
    counted_to = max(counted_to, COALESCE((SELECT MAX(t.seq) FROM events_outbox AS t
                                           WHERE t.engine_run_id = outbox_runs.engine_run_id AND t.seq > outbox_runs.counted_to AND t.counted = 1), 0))
WHERE EXISTS (SELECT 1 FROM events_outbox AS t
              WHERE t.engine_run_id = outbox_runs.engine_run_id AND t.seq > outbox_runs.counted_to AND t.counted = 1);

DROP TRIGGER outbox_runs_visit;

-- +goose StatementBegin
CREATE TRIGGER outbox_runs_visit AFTER UPDATE OF visit, lines, last_seq, projected, forgotten ON outbox_runs
WHEN NEW.visit = 0 AND NEW.lines > 0 AND (NEW.last_seq > NEW.projected OR NEW.projected > NEW.forgotten)
BEGIN
    UPDATE outbox_runs SET visit = 1 WHERE engine_run_id = NEW.engine_run_id;
END;
-- +goose StatementEnd

DROP VIEW outbox_run_figures;
