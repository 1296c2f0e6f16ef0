-- name: SourceGet :one
-- The stored position and whether a Release or AcceptGap rewound it since it was stored.
SELECT position, rewound FROM inbox_sources WHERE name = sqlc.arg(name);

-- name: SourceSet :exec
INSERT INTO inbox_sources (name, position, rewound, updated_at)
VALUES (sqlc.arg(name), sqlc.arg(position), 0, sqlc.arg(updated_at))
ON CONFLICT (name) DO UPDATE SET position = excluded.position, rewound = 0, updated_at = excluded.updated_at;

-- name: SourcesRewind :exec
-- Every source reads again from its start (Release, AcceptGap). The position is kept, marked
-- rewound: what it still owed is read too. A source rewound again before it stored a position keeps
-- the position it was first rewound from.
UPDATE inbox_sources SET rewound = 1, updated_at = sqlc.arg(updated_at)
WHERE position IS NOT NULL AND rewound = 0;

-- name: SourcesAfter :many
-- A page of the sources, in name order after a name.
SELECT name, position, rewound, updated_at
FROM inbox_sources
WHERE name > sqlc.arg(after)
ORDER BY name
LIMIT sqlc.arg(max_rows);

-- name: SourceGetUnmarked :one
-- SourceGet on a database of an earlier release, which has no rewound mark (read beside it).
SELECT position FROM inbox_sources WHERE name = sqlc.arg(name);

-- name: SourcesAfterUnmarked :many
-- SourcesAfter on a database of an earlier release, which has no rewound mark (read beside it).
SELECT name, position, updated_at
FROM inbox_sources
WHERE name > sqlc.arg(after)
ORDER BY name
LIMIT sqlc.arg(max_rows);
