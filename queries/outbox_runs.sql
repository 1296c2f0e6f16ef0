-- name: RunsPage :many
-- One page of the runs that hold at least min_lines rows (1: AllRuns; 0: every run the book ever
-- held, EveryRun), after a run id (keyset paging along the primary key), with what AllRuns, stats and
-- metrics show: a row per run and the tail of a marked one (migrations/00010), never a pass over the
-- stored lines. oldest_pending is the enqueue time of the first line after the projected position
-- (0: none, or unknown), read only for a run with lines pending; stopped_seq is where the sink refused
-- the run (0: not stopped, migrations/00004).
SELECT r.engine_run_id, r.last_seq, r.projected, r.forgotten, r.lines, r.ledger_lines,
       CAST(CASE WHEN r.last_seq > r.projected THEN COALESCE((
           SELECT o.enqueued_at FROM events_outbox AS o
           WHERE o.engine_run_id = r.engine_run_id AND o.seq > r.projected
           ORDER BY o.seq
           LIMIT 1
       ), 0) ELSE 0 END AS INTEGER) AS oldest_pending,
       CAST(COALESCE(st.seq, 0) AS INTEGER) AS stopped_seq,
       CAST(COALESCE(st.reason, '') AS TEXT) AS stopped_reason,
       CAST(COALESCE(st.stopped_at, 0) AS INTEGER) AS stopped_at
FROM outbox_run_figures AS r
LEFT JOIN outbox_stops AS st ON st.engine_run_id = r.engine_run_id
WHERE r.engine_run_id > CAST(sqlc.arg(after_run) AS TEXT) AND r.lines >= CAST(sqlc.arg(min_lines) AS INTEGER)
ORDER BY r.engine_run_id
LIMIT sqlc.arg(max_runs);

-- name: RunsOpenPage :many
-- One page of the runs recovery visits and metrics name, after a run id: rows stored and either
-- lines pending or projected rows not yet forgotten (a run a relay stopped on has lines pending). The
-- WHERE repeats the partial index's (migrations/00008) so that the planner walks it: a start visits
-- the runs marked visit, every run that needs recovery among them, and no other; the test after it
-- leaves out a marked run finished since (RunsCloseFinished unmarks those). stored_last is the highest
-- seq still stored: how far recovery projects.
SELECT r.engine_run_id, r.last_seq, r.projected, r.forgotten, r.lines, r.ledger_lines,
       CAST(COALESCE((SELECT MAX(o.seq) FROM events_outbox AS o WHERE o.engine_run_id = r.engine_run_id), 0) AS INTEGER) AS stored_last,
       CAST(CASE WHEN r.last_seq > r.projected THEN COALESCE((
           SELECT o.enqueued_at FROM events_outbox AS o
           WHERE o.engine_run_id = r.engine_run_id AND o.seq > r.projected
           ORDER BY o.seq
           LIMIT 1
       ), 0) ELSE 0 END AS INTEGER) AS oldest_pending,
       CAST(COALESCE(st.seq, 0) AS INTEGER) AS stopped_seq,
       CAST(COALESCE(st.reason, '') AS TEXT) AS stopped_reason,
       CAST(COALESCE(st.stopped_at, 0) AS INTEGER) AS stopped_at
FROM outbox_run_figures AS r
LEFT JOIN outbox_stops AS st ON st.engine_run_id = r.engine_run_id
WHERE r.engine_run_id > CAST(sqlc.arg(after_run) AS TEXT) AND r.visit = 1
  AND r.lines > 0 AND (r.last_seq > r.projected OR r.projected > r.forgotten)
ORDER BY r.engine_run_id
LIMIT sqlc.arg(max_runs);

-- name: RunsCloseFinished :execrows
-- Unmarks the marked runs that are finished: no tail (migrations/00010), and no row stored, or every
-- line projected and every projected row forgotten. It walks the index of the marked runs, which holds the runs that needed
-- recovery since the last time this ran: a few per start. The test is made in the statement that
-- clears the mark, so a run that needs recovery is never unmarked (and the triggers of migrations/00008
-- mark it again in the statement that makes it need recovery).
UPDATE outbox_runs SET visit = 0
WHERE visit = 1 AND NOT (lines > 0 AND (last_seq > projected OR projected > forgotten))
  AND NOT EXISTS (
      SELECT 1 FROM events_outbox AS t
      WHERE t.engine_run_id = outbox_runs.engine_run_id AND t.seq > outbox_runs.counted_to AND t.counted = 1
  );

-- name: RunsTotals :one
-- The book's figures for metrics and stats: one pass over the per-run rows (a row per run, not per
-- line, and the tails of the marked runs, migrations/00010), which are never deleted, so the sums of
-- last_seq and projected never go down.
SELECT CAST(count(*) AS INTEGER) AS runs,
       CAST(COALESCE(SUM(lines > 0), 0) AS INTEGER) AS runs_with_lines,
       CAST(COALESCE(SUM(last_seq), 0) AS INTEGER) AS enqueued,
       CAST(COALESCE(SUM(projected), 0) AS INTEGER) AS projected,
       CAST(COALESCE(SUM(max(last_seq - projected, 0)), 0) AS INTEGER) AS pending,
       CAST(COALESCE(SUM(lines), 0) AS INTEGER) AS lines,
       CAST(COALESCE(SUM(ledger_lines), 0) AS INTEGER) AS ledger_lines,
       CAST((SELECT count(*) FROM outbox_stops) AS INTEGER) AS stopped_runs
FROM outbox_run_figures
WHERE engine_run_id >= '';

-- name: RunGet :one
-- One run's figures, its tail added (migrations/00010); no row for a run the book never held.
SELECT last_seq, projected, forgotten, lines, ledger_lines
FROM outbox_run_figures
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: RunSetForgotten :exec
-- Every row of the run up to seq that holds no once key is gone (see EventsForgetRange).
UPDATE outbox_runs SET forgotten = max(forgotten, CAST(sqlc.arg(seq) AS INTEGER))
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: RunAddLines :exec
-- Folds a run's tail (migrations/00010: its rows the store inserted after counted_to, still stored)
-- into its row, once, before the transaction commits, when it must: the run has no row yet, or is not
-- marked visit (a run with a tail is always marked), or the tail would reach 256 seqs (last_seq is
-- the highest the transaction gave the run). Otherwise it writes nothing, and the commit writes no
-- page of the run's row: the rows it inserted stay the tail that readers add. The test is in the
-- bound of the range, which is then past every seq, so that the statement reads one row of the
-- run's figures and none of its tail (a test of its own is evaluated at each row of the range). What is folded is read
-- from the rows, so that one the transaction took out again (a DELETE, a rollback to a savepoint) is
-- not added, and the delete trigger left it out too (migrations/00007). No row is made for a run none
-- of whose lines is left. A row made here is marked for recovery (migrations/00008) as it is made;
-- the update leaves the mark alone, so that it writes no page of the index of the marked runs.
INSERT INTO outbox_runs (engine_run_id, last_seq, lines, counted_to, visit)
SELECT e.engine_run_id, MAX(e.seq), count(*), MAX(e.seq), 1
FROM events_outbox AS e
WHERE e.engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
  AND e.seq > COALESCE((
      SELECT CASE WHEN f.visit = 0 OR CAST(sqlc.arg(last_seq) AS INTEGER) - f.counted_to >= 256 THEN f.counted_to
             ELSE 9223372036854775807 END
      FROM outbox_runs AS f WHERE f.engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
  ), 0)
  AND e.counted = 1
GROUP BY e.engine_run_id
ON CONFLICT (engine_run_id) DO UPDATE
SET last_seq = max(last_seq, excluded.last_seq), lines = lines + excluded.lines,
    counted_to = max(counted_to, excluded.counted_to);

-- name: RunFold :exec
-- Folds a run's tail into its row whatever its length: the relay's record, which writes the row
-- anyway, and forgetting, before it deletes rows (a row of the tail deleted before it is folded would
-- take its seq out of last_seq when it is the highest).
INSERT INTO outbox_runs (engine_run_id, last_seq, lines, counted_to, visit)
SELECT e.engine_run_id, MAX(e.seq), count(*), MAX(e.seq), 1
FROM events_outbox AS e
WHERE e.engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
  AND e.seq > COALESCE((SELECT f.counted_to FROM outbox_runs AS f WHERE f.engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)), 0)
  AND e.counted = 1
GROUP BY e.engine_run_id
ON CONFLICT (engine_run_id) DO UPDATE
SET last_seq = max(last_seq, excluded.last_seq), lines = lines + excluded.lines,
    counted_to = max(counted_to, excluded.counted_to);

-- name: EventsForgetRange :execrows
-- One bounded step of forgetting: the run's rows after one seq and up to another that hold no once
-- key. The range is a walk along the primary key, so a step reads what it deletes and the ledger rows
-- between them, and no row below it.
DELETE FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq > sqlc.arg(after_seq) AND seq <= sqlc.arg(up_to)
  AND once_key = '';

-- name: RunsLedgerSize :one
-- How many keys the ledger holds, from the runs' figures: a row per run, not a pass over the keys.
SELECT CAST(COALESCE(SUM(ledger_lines), 0) AS INTEGER) AS keys
FROM outbox_runs;
