-- name: RunsAfter :many
-- A page of the runs, in run id order after a run id: each run's high-water mark and when it last
-- applied a line (for stats).
SELECT engine_run_id, hwm, applied_at
FROM inbox_runs
WHERE engine_run_id > sqlc.arg(after)
ORDER BY engine_run_id
LIMIT sqlc.arg(max_rows);

-- name: RunsCount :one
-- How many runs the inbox holds a high-water mark for (for metrics: one figure, not a series per run).
SELECT count(*) AS runs FROM inbox_runs;
