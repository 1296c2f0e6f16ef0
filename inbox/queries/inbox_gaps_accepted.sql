-- name: GapAcceptedInsert :exec
INSERT INTO inbox_gaps_accepted (engine_run_id, first_seq, last_seq, reason, accepted_by, accepted_at)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(first_seq), sqlc.arg(last_seq), sqlc.arg(reason), sqlc.arg(accepted_by), sqlc.arg(accepted_at));

-- name: GapsAcceptedAfter :many
-- A page of the accepted gaps, in the order they were accepted.
SELECT id, engine_run_id, first_seq, last_seq, reason, accepted_by, accepted_at
FROM inbox_gaps_accepted
WHERE id > sqlc.arg(after)
ORDER BY id
LIMIT sqlc.arg(max_rows);
