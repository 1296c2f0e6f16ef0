-- name: EventInsert :exec
INSERT INTO events_outbox (engine_run_id, seq, line)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(seq), sqlc.arg(line));

-- name: EventNextSeq :one
SELECT CAST(COALESCE(MAX(seq), 0) + 1 AS INTEGER) AS next_seq
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: EventOnceKey :one
-- The key a row holds in the ledger (empty when none); no row when the event does not exist.
SELECT once_key
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq);

-- name: EventMarkAnnounced :execrows
-- Matches a row that holds no key yet or already holds this one, so re-marking is a no-op that still
-- counts the row; a row holding another key is left alone and counts zero.
UPDATE events_outbox
SET once_key = CAST(sqlc.arg(once_key) AS TEXT)
WHERE engine_run_id = sqlc.arg(engine_run_id)
  AND seq = sqlc.arg(seq)
  AND once_key IN ('', CAST(sqlc.arg(once_key) AS TEXT));

-- name: EventsAnnouncedKeys :many
-- The whole ledger. Bounded by the book (one key per announced unit), not by the number of runs.
SELECT once_key
FROM events_outbox
WHERE once_key <> '';

-- name: EventsForget :execrows
-- Drops the buffered rows of every run but the given one. Ledger rows stay: they are what a reader has
-- been told, and losing them would re-announce the book.
DELETE FROM events_outbox
WHERE engine_run_id <> sqlc.arg(engine_run_id) AND once_key = '';

-- name: EventsOnceKeyExists :one
-- The trailing non-empty test is what lets the planner use the partial index (migrations/00001):
-- with a bound parameter it cannot prove the key non-empty, and the bare equality plans as a SCAN.
SELECT CAST(EXISTS (
    SELECT 1 FROM events_outbox
    WHERE once_key = CAST(sqlc.arg(once_key) AS TEXT) AND once_key <> ''
) AS INTEGER) AS found;

-- name: EventsPending :many
SELECT seq, line
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT sqlc.arg(max_rows);

-- name: EventsRunUsed :one
SELECT CAST(EXISTS (
    SELECT 1 FROM events_outbox WHERE engine_run_id = sqlc.arg(engine_run_id)
) AS INTEGER) AS used;
