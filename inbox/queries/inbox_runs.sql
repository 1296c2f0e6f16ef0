-- name: RunState :one
-- A run's high-water mark (0 for a run never seen) and whether it is quarantined, in one read.
SELECT CAST(COALESCE((SELECT r.hwm FROM inbox_runs AS r WHERE r.engine_run_id = sqlc.arg(engine_run_id)), 0) AS INTEGER) AS hwm,
       CAST(EXISTS (SELECT 1 FROM inbox_quarantine AS q WHERE q.engine_run_id = sqlc.arg(engine_run_id)) AS INTEGER) AS quarantined;

-- name: RunPosition :one
SELECT CAST(COALESCE(MAX(hwm), 0) AS INTEGER) AS hwm
FROM inbox_runs
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: RunSet :exec
-- Records how far a run has applied. Never moves backwards; a run that applies is no longer trimmed.
INSERT INTO inbox_runs (engine_run_id, hwm, applied_at)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(hwm), sqlc.arg(applied_at))
ON CONFLICT (engine_run_id) DO UPDATE SET hwm = max(hwm, excluded.hwm), applied_at = excluded.applied_at, trimmed = 0;

-- name: RunsUntrimmed :many
-- The runs whose digests are still to be trimmed once they are idle, longest idle first.
SELECT engine_run_id, hwm, applied_at
FROM inbox_runs
WHERE trimmed = 0
ORDER BY applied_at
LIMIT sqlc.arg(max_runs);

-- name: RunMarkTrimmed :exec
UPDATE inbox_runs SET trimmed = 1 WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: RunsAfter :many
-- A page of the runs, in run id order after a run id.
SELECT engine_run_id, hwm, applied_at
FROM inbox_runs
WHERE engine_run_id > sqlc.arg(after)
ORDER BY engine_run_id
LIMIT sqlc.arg(max_rows);
