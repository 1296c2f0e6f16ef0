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

-- name: LedgerEmptyLine :execrows
-- Replaces a projected ledger row's line with its digest, and drops what only a pending line needs:
-- its announce key (the ledger's index holds the key), its enqueue time, and its large line (the
-- trigger of migrations/00006).
UPDATE events_outbox
SET digest = sqlc.arg(digest), line = x'', announce_key = '', enqueued_at = 0, spill = 0
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq) AND once_key <> '' AND digest IS NULL;

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
