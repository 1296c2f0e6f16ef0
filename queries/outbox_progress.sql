-- name: ProgressForgetOrphans :execrows
-- Drops the progress of runs that have no row left; a run with rows keeps its progress, or a restart
-- would re-send its ledger rows.
DELETE FROM outbox_progress
WHERE NOT EXISTS (
    SELECT 1 FROM events_outbox WHERE events_outbox.engine_run_id = outbox_progress.engine_run_id
);

-- name: ProgressGet :one
SELECT CAST(COALESCE(MAX(projected), 0) AS INTEGER) AS projected
FROM outbox_progress
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: ProgressSet :exec
-- Never moves backwards: a slower writer of an older position cannot undo a newer one.
INSERT INTO outbox_progress (engine_run_id, projected)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(projected))
ON CONFLICT (engine_run_id) DO UPDATE SET projected = max(projected, excluded.projected);
