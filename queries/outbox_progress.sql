-- name: ProgressKeepLastSeq :exec
-- The same for one run, before recovery drops its projected rows.
INSERT INTO outbox_progress (engine_run_id, projected, last_seq)
VALUES (sqlc.arg(engine_run_id), 0, sqlc.arg(last_seq))
ON CONFLICT (engine_run_id) DO UPDATE SET last_seq = max(last_seq, excluded.last_seq);

-- name: ProgressGet :one
-- A run's projected position and the highest seq recorded for it when its rows were forgotten; zeros
-- for a run without a progress row.
SELECT CAST(COALESCE(MAX(projected), 0) AS INTEGER) AS projected,
       CAST(COALESCE(MAX(last_seq), 0) AS INTEGER) AS last_seq
FROM outbox_progress
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: ProgressSet :exec
-- Never moves backwards: a slower writer of an older position cannot undo a newer one.
INSERT INTO outbox_progress (engine_run_id, projected)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(projected))
ON CONFLICT (engine_run_id) DO UPDATE SET projected = max(projected, excluded.projected);

-- name: ProgressPage :many
-- One page of every run's recorded positions, after a run id (keyset paging along the primary key):
-- the runs ever projected or forgotten, whose rows may all be gone, for a cross-check of the book
-- against its journal (outbox check) that holds neither the whole list nor a long read.
SELECT engine_run_id, projected, last_seq
FROM outbox_progress
WHERE engine_run_id > CAST(sqlc.arg(after_run) AS TEXT)
ORDER BY engine_run_id
LIMIT sqlc.arg(max_runs);
