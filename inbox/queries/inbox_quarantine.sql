-- name: QuarantineInsert :exec
INSERT INTO inbox_quarantine (engine_run_id, reason, expected, got, detail, since)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(reason), sqlc.arg(expected), sqlc.arg(got), sqlc.arg(detail), sqlc.arg(since));

-- name: QuarantineGet :one
SELECT engine_run_id, reason, expected, got, detail, since
FROM inbox_quarantine
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: QuarantineDelete :execrows
DELETE FROM inbox_quarantine WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: QuarantinesAfter :many
-- A page of the quarantined runs, in run id order after a run id.
SELECT engine_run_id, reason, expected, got, detail, since
FROM inbox_quarantine
WHERE engine_run_id > sqlc.arg(after)
ORDER BY engine_run_id
LIMIT sqlc.arg(max_rows);
