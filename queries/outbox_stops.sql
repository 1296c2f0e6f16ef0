-- name: StopSet :exec
-- Records that a run's projection stopped on the sink's refusal of the batch starting at seq; a later
-- refusal of the same run replaces it.
INSERT INTO outbox_stops (engine_run_id, seq, reason, stopped_at)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(seq), sqlc.arg(reason), sqlc.arg(stopped_at))
ON CONFLICT (engine_run_id) DO UPDATE
SET seq = excluded.seq, reason = excluded.reason, stopped_at = excluded.stopped_at;

-- name: StopClear :exec
-- The run projected again: it is no longer stopped.
DELETE FROM outbox_stops WHERE engine_run_id = sqlc.arg(engine_run_id);
