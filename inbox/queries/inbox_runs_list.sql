-- name: RunsCount :one
-- How many runs the inbox holds a high-water mark for (for metrics: one figure, not a series per run).
SELECT count(*) AS runs FROM inbox_runs;
