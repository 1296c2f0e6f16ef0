-- name: LedgerLinesToEmpty :many
-- A page of the ledger rows that still hold their line and are at or below their run's projected
-- position (the sink has them), along the partial index of such rows (migrations/00006).
SELECT o.engine_run_id, o.seq
FROM events_outbox AS o
JOIN outbox_progress AS p ON p.engine_run_id = o.engine_run_id
WHERE o.once_key <> '' AND o.digest IS NULL AND o.seq <= p.projected
LIMIT sqlc.arg(max_rows);

-- name: LedgerLineGet :one
-- A ledger row's line, its large line read from events_lines, to digest it; empty when a book
-- migrated down and up again lost it.
SELECT CAST(CASE WHEN spill = 0 THEN line
            ELSE (SELECT events_lines.line FROM events_lines WHERE events_lines.id = events_outbox.spill) END AS BLOB) AS line
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq) AND once_key <> '' AND digest IS NULL;

-- name: LedgerTakeProjected :one
-- Takes out the row of a projected line whose announce key is not yet in the ledger, for LedgerPut to
-- put back as a ledger row; its large line goes with it (the trigger of migrations/00003). No row
-- when the line holds no such key. A delete and an insert, not an UPDATE: SQLite rebalances a page
-- when a delete leaves it under a third full, never when an update shrinks a row, and ledger rows
-- shrunk in place left their pages about a fifth full (430 bytes of book a key, not 150).
DELETE FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq) AND announce_key <> '' AND once_key = ''
RETURNING announce_key;

-- name: LedgerTakeLine :one
-- Takes out a ledger row that still holds its line, as LedgerTakeProjected does, returning its key.
DELETE FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq) AND once_key <> '' AND digest IS NULL
RETURNING once_key;

-- name: LedgerPut :exec
-- Puts a projected line's row back as a ledger row: its key and its line's digest, without the line,
-- a pending key or an enqueue time. A key another row holds fails on the ledger's unique index.
INSERT INTO events_outbox (engine_run_id, seq, line, once_key, digest)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(seq), x'', CAST(sqlc.arg(once_key) AS TEXT), sqlc.arg(digest));

-- name: LedgerRunRows :many
-- One page of a run's stored rows in seq order, for a cross-check with the journal: a row that holds
-- its line gives the line (emptied 0); a projected ledger row gives an empty line, emptied 1 and its
-- digest (empty when it has none).
SELECT seq,
       CAST(CASE WHEN spill = 0 THEN line
            ELSE (SELECT events_lines.line FROM events_lines WHERE events_lines.id = events_outbox.spill) END AS BLOB) AS line,
       CAST(digest IS NOT NULL AS INTEGER) AS emptied,
       CAST(COALESCE(digest, x'') AS BLOB) AS digest
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT sqlc.arg(max_rows);

-- name: LedgerRowGet :one
-- One stored row as LedgerRunRows gives it.
SELECT CAST(CASE WHEN spill = 0 THEN line
            ELSE (SELECT events_lines.line FROM events_lines WHERE events_lines.id = events_outbox.spill) END AS BLOB) AS line,
       CAST(digest IS NOT NULL AS INTEGER) AS emptied,
       CAST(COALESCE(digest, x'') AS BLOB) AS digest
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq);
