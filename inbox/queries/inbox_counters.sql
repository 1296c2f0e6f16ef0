-- name: CountersAdd :exec
-- Adds a call's outcome to the counts, in the call's transaction. An upsert, so that a database
-- whose row was removed by hand counts again from zero instead of failing the call.
INSERT INTO inbox_counters (id, applied, duplicates, stale, quarantined)
VALUES (1, sqlc.arg(applied), sqlc.arg(duplicates), sqlc.arg(stale), sqlc.arg(quarantined))
ON CONFLICT (id) DO UPDATE SET applied = applied + excluded.applied,
    duplicates = duplicates + excluded.duplicates,
    stale = stale + excluded.stale,
    quarantined = quarantined + excluded.quarantined;

-- name: CountersGet :one
-- The counts: one row read, whatever the runs and lines (zeros when the row is missing).
SELECT CAST(COALESCE(MAX(applied), 0) AS INTEGER) AS applied,
       CAST(COALESCE(MAX(duplicates), 0) AS INTEGER) AS duplicates,
       CAST(COALESCE(MAX(stale), 0) AS INTEGER) AS stale,
       CAST(COALESCE(MAX(quarantined), 0) AS INTEGER) AS quarantined
FROM inbox_counters
WHERE id = 1;
