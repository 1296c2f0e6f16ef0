-- name: SourceGet :one
SELECT position FROM inbox_sources WHERE name = sqlc.arg(name);

-- name: SourceSet :exec
INSERT INTO inbox_sources (name, position, updated_at)
VALUES (sqlc.arg(name), sqlc.arg(position), sqlc.arg(updated_at))
ON CONFLICT (name) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at;

-- name: SourcesRewind :exec
-- Every source reads again from its start (Release, AcceptGap).
UPDATE inbox_sources SET position = NULL, updated_at = sqlc.arg(updated_at) WHERE position IS NOT NULL;

-- name: SourcesAfter :many
-- A page of the sources, in name order after a name.
SELECT name, position, updated_at
FROM inbox_sources
WHERE name > sqlc.arg(after)
ORDER BY name
LIMIT sqlc.arg(max_rows);
