-- name: DigestGet :one
-- The digest of a run's line seq, from the row (chunk) that holds it; no row when none does.
SELECT CAST(substr(digests, (CAST(sqlc.arg(seq) AS INTEGER) - first_seq) * 32 + 1, 32) AS BLOB) AS digest
FROM inbox_digests
WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT) AND chunk = CAST(sqlc.arg(chunk) AS INTEGER)
  AND first_seq <= CAST(sqlc.arg(seq) AS INTEGER) AND CAST(sqlc.arg(seq) AS INTEGER) < first_seq + length(digests) / 32;

-- name: DigestsAppend :exec
-- Appends the digests of a run's lines first_seq, first_seq+1, ..., all in row chunk, to that row:
-- digests holds their SHA-256 sums one after the other. The seqs between the row's last and first_seq
-- (given up by an accepted gap) get 32 zero bytes each. A row that already reaches first_seq cannot
-- happen (lines are applied above the high-water mark, and a row holds no seq past it); should it,
-- the digests given replace the row.
INSERT INTO inbox_digests (engine_run_id, chunk, first_seq, digests)
VALUES (CAST(sqlc.arg(engine_run_id) AS TEXT), CAST(sqlc.arg(chunk) AS INTEGER), CAST(sqlc.arg(first_seq) AS INTEGER), CAST(sqlc.arg(digests) AS BLOB))
ON CONFLICT (engine_run_id, chunk) DO UPDATE SET
    digests = CASE WHEN excluded.first_seq >= first_seq + length(digests) / 32
                   THEN CAST(digests || zeroblob((excluded.first_seq - first_seq - length(digests) / 32) * 32) || excluded.digests AS BLOB)
                   ELSE excluded.digests END,
    first_seq = CASE WHEN excluded.first_seq >= first_seq + length(digests) / 32 THEN first_seq ELSE excluded.first_seq END;

-- name: DigestsDropBelow :exec
-- Drops a run's rows below a chunk: those whose every seq has left its window.
DELETE FROM inbox_digests WHERE engine_run_id = sqlc.arg(engine_run_id) AND chunk < sqlc.arg(chunk);

-- name: DigestsTrim :execrows
-- Drops up to max_rows of an idle run's rows that do not hold the digest of its high-water mark hwm
-- (which is in row hwm_chunk if kept), lowest first: bounded work, so a call that trims many runs
-- stays short.
DELETE FROM inbox_digests
WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
  AND chunk IN (SELECT d.chunk FROM inbox_digests AS d
                WHERE d.engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
                  AND NOT (d.chunk = CAST(sqlc.arg(hwm_chunk) AS INTEGER) AND d.first_seq <= CAST(sqlc.arg(hwm) AS INTEGER)
                           AND CAST(sqlc.arg(hwm) AS INTEGER) < d.first_seq + length(d.digests) / 32)
                ORDER BY d.chunk LIMIT CAST(sqlc.arg(max_rows) AS INTEGER));

-- name: DigestsKeepLast :exec
-- Shrinks the row that holds the digest of a run's high-water mark hwm to that digest alone.
UPDATE inbox_digests
SET first_seq = CAST(sqlc.arg(hwm) AS INTEGER),
    digests = CAST(substr(digests, (CAST(sqlc.arg(hwm) AS INTEGER) - first_seq) * 32 + 1, 32) AS BLOB)
WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT) AND chunk = CAST(sqlc.arg(hwm_chunk) AS INTEGER)
  AND first_seq < CAST(sqlc.arg(hwm) AS INTEGER) AND CAST(sqlc.arg(hwm) AS INTEGER) < first_seq + length(digests) / 32;
