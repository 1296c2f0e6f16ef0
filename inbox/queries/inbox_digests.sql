-- name: DigestGet :one
SELECT digest FROM inbox_digests WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq);

-- name: DigestsInsert :exec
-- Stores the digests of a run's lines first_seq, first_seq+1, ... in one statement: digests is a JSON
-- array of their SHA-256 sums in hex.
INSERT INTO inbox_digests (engine_run_id, seq, digest)
SELECT CAST(sqlc.arg(engine_run_id) AS TEXT), CAST(sqlc.arg(first_seq) AS INTEGER) + j.key, unhex(j.value)
FROM json_each(CAST(sqlc.arg(digests) AS TEXT)) AS j;

-- name: DigestsDropThrough :exec
-- Drops a run's digests at or below a seq: those that have left its window.
DELETE FROM inbox_digests WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq <= sqlc.arg(through);

-- name: DigestsTrim :execrows
-- Drops up to max_rows of an idle run's digests below its high-water mark, lowest first: bounded
-- work, so a call that trims many runs stays short.
DELETE FROM inbox_digests
WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
  AND seq IN (SELECT d.seq FROM inbox_digests AS d
              WHERE d.engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT) AND d.seq < CAST(sqlc.arg(below) AS INTEGER)
              ORDER BY d.seq LIMIT CAST(sqlc.arg(max_rows) AS INTEGER));
