-- name: EventInsert :execrows
-- spill: 0, or the rowid in events_lines of a large line, whose row then holds an empty line.
-- counted: the store adds the row to its run's figures itself, once per transaction (RunAddLines),
-- so the insert trigger passes it by (migrations/00007).
INSERT INTO events_outbox (engine_run_id, seq, line, announce_key, enqueued_at, spill, counted)
VALUES (sqlc.arg(engine_run_id), sqlc.arg(seq), sqlc.arg(line), CAST(sqlc.arg(announce_key) AS TEXT),
        sqlc.arg(enqueued_at), sqlc.arg(spill), 1);

-- name: EventLineInsert :execlastid
-- A large line, stored apart from its row (migrations/00003).
INSERT INTO events_lines (line) VALUES (sqlc.arg(line));

-- name: EventDelete :exec
-- A row whose insert failed after it was written (a trigger's RAISE(FAIL) keeps what the statement
-- wrote): the caller is told the insert failed, so the row must not stay.
DELETE FROM events_outbox WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq);

-- name: EventLineDelete :exec
-- A large line whose row could not be inserted: in a group commit only the failed statement is undone.
DELETE FROM events_lines WHERE id = sqlc.arg(id);

-- name: EventLastSeq :one
-- The highest seq the run was ever given: its highest stored row, the number recorded when its rows
-- were forgotten (migrations/00003), or its figures' last_seq as of their last fold (migrations/00010),
-- whichever is highest. The next seq is one more, computed in Go so that a run at 2^63-1 is refused
-- instead of wrapping.
SELECT CAST(max(
    COALESCE((SELECT MAX(seq) FROM events_outbox WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)), 0),
    COALESCE((SELECT last_seq FROM outbox_progress WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)), 0),
    COALESCE((SELECT last_seq FROM outbox_runs WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)), 0)
) AS INTEGER) AS last_seq;

-- name: EventOnceKey :one
-- The keys a row holds, in the ledger and pending (empty when none); no row when the event does not
-- exist.
SELECT once_key, announce_key
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq);

-- name: EventMarkAnnounced :execrows
-- Matches a row that holds no key yet or already holds this one (in the ledger or as its pending
-- announce key), so re-marking is a no-op that still counts the row; a row holding another key, or a
-- key that another row holds pending, is left alone and counts zero. A key another row holds in the
-- ledger fails on the unique index.
UPDATE events_outbox
SET once_key = CAST(sqlc.arg(once_key) AS TEXT)
WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
  AND seq = CAST(sqlc.arg(seq) AS INTEGER)
  AND once_key IN ('', CAST(sqlc.arg(once_key) AS TEXT))
  AND announce_key IN ('', CAST(sqlc.arg(once_key) AS TEXT))
  AND NOT EXISTS (
      SELECT 1 FROM events_outbox AS other
      WHERE other.announce_key = CAST(sqlc.arg(once_key) AS TEXT) AND other.announce_key <> ''
        AND (other.engine_run_id <> CAST(sqlc.arg(engine_run_id) AS TEXT)
             OR other.seq <> CAST(sqlc.arg(seq) AS INTEGER))
  );

-- name: EventsAnnouncedKeys :many
-- The whole ledger. Bounded by the book (one key per announced unit), not by the number of runs.
SELECT once_key
FROM events_outbox
WHERE once_key <> '';

-- name: EventKeyHolder :one
-- The row that holds a key, in the ledger or pending, to name it in a conflict.
SELECT engine_run_id, seq
FROM events_outbox
WHERE once_key = CAST(sqlc.arg(once_key) AS TEXT) AND once_key <> ''
UNION ALL
SELECT engine_run_id, seq
FROM events_outbox
WHERE announce_key = CAST(sqlc.arg(once_key) AS TEXT) AND announce_key <> ''
LIMIT 1;

-- name: EventsOnceKeyExists :one
-- Whether the key is in the ledger or pending on a row not yet projected. Each non-empty test is what
-- lets the planner use its partial index (migrations/00001): with a bound parameter it cannot prove
-- the key non-empty, and the bare equality plans as a SCAN.
SELECT CAST(EXISTS (
    SELECT 1 FROM events_outbox
    WHERE once_key = CAST(sqlc.arg(once_key) AS TEXT) AND once_key <> ''
) OR EXISTS (
    SELECT 1 FROM events_outbox
    WHERE announce_key = CAST(sqlc.arg(once_key) AS TEXT) AND announce_key <> ''
) AS INTEGER) AS found;

-- name: EventsPending :many
-- to_mark: the line carries an announce key not yet in the ledger, which the relay moves there once
-- the line is in the sink; reading it here spares the relay's record a pass over the whole batch.
-- A ledger row whose line the book no longer keeps (digest set, migrations/00006) is left out, as a
-- forgotten row is: it has no line to give, and the relay takes the hole for missing rows.
SELECT seq,
       CAST(CASE WHEN spill = 0 THEN line
            ELSE (SELECT events_lines.line FROM events_lines WHERE events_lines.id = events_outbox.spill) END AS BLOB) AS line,
       CAST(announce_key <> '' AND once_key = '' AS INTEGER) AS to_mark
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq > sqlc.arg(after_seq) AND digest IS NULL
ORDER BY seq
LIMIT sqlc.arg(max_rows);

-- name: EventsRunUsed :one
-- A run is used once it has a row, or a progress row: projected, or its rows forgotten (migrations/00003).
SELECT CAST(EXISTS (
    SELECT 1 FROM events_outbox WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
) OR EXISTS (
    SELECT 1 FROM outbox_progress WHERE engine_run_id = CAST(sqlc.arg(engine_run_id) AS TEXT)
) AS INTEGER) AS used;

-- name: EventsLastSeq :one
SELECT CAST(COALESCE(MAX(seq), 0) AS INTEGER) AS last_seq
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id);

-- name: EventsRuns :many
-- One page of the runs that have rows, after a run id (keyset paging along the primary key), with
-- what recovery and the command's stats need: the page is one bounded query, so listing a book of any
-- number of runs holds neither a long read transaction nor the whole list. oldest_pending is the
-- enqueue time of the first line after the projected position (0: none, or unknown); stopped_seq is
-- where the sink refused the run (0: not stopped, migrations/00004).
SELECT r.engine_run_id,
       CAST(r.lines AS INTEGER) AS lines,
       CAST(r.last_seq AS INTEGER) AS last_seq,
       CAST(r.ledger_lines AS INTEGER) AS ledger_lines,
       CAST(COALESCE(p.projected, 0) AS INTEGER) AS projected,
       CAST(COALESCE(p.last_seq, 0) AS INTEGER) AS forgotten_last_seq,
       CAST(COALESCE((
           SELECT o.enqueued_at FROM events_outbox AS o
           WHERE o.engine_run_id = r.engine_run_id AND o.seq > COALESCE(p.projected, 0)
           ORDER BY o.seq
           LIMIT 1
       ), 0) AS INTEGER) AS oldest_pending,
       CAST(COALESCE(st.seq, 0) AS INTEGER) AS stopped_seq,
       CAST(COALESCE(st.reason, '') AS TEXT) AS stopped_reason,
       CAST(COALESCE(st.stopped_at, 0) AS INTEGER) AS stopped_at
FROM (
    SELECT engine_run_id, count(*) AS lines, MAX(seq) AS last_seq, SUM(once_key <> '') AS ledger_lines
    FROM events_outbox
    WHERE engine_run_id > CAST(sqlc.arg(after_run) AS TEXT)
    GROUP BY engine_run_id
    ORDER BY engine_run_id
    LIMIT CAST(sqlc.arg(max_runs) AS INTEGER)
) AS r
LEFT JOIN outbox_progress AS p ON p.engine_run_id = r.engine_run_id
LEFT JOIN outbox_stops AS st ON st.engine_run_id = r.engine_run_id
ORDER BY r.engine_run_id;

-- name: EventsLedgerSize :one
-- How many keys the ledger holds, counted along its partial index without loading it.
SELECT CAST(count(*) AS INTEGER) AS keys
FROM events_outbox
WHERE once_key <> '';

-- name: EventsOldestAfter :one
-- The enqueue time of the first line after a position: the age of a run's unprojected backlog.
SELECT CAST(enqueued_at AS INTEGER) AS enqueued_at
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT 1;

-- name: EventGet :one
-- One stored line, its large line read from events_lines, with the keys it holds.
SELECT CAST(CASE WHEN spill = 0 THEN line
            ELSE (SELECT events_lines.line FROM events_lines WHERE events_lines.id = events_outbox.spill) END AS BLOB) AS line,
       spill, once_key, announce_key
FROM events_outbox
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq);

-- name: EventRetire :execrows
-- Replaces a line not yet projected with its tombstone, in its row (a tombstone is small), and frees
-- its pending once key: the announcement never reached a reader. A row whose key is in the ledger was
-- projected and is left alone.
UPDATE events_outbox
SET line = sqlc.arg(line), spill = 0, announce_key = ''
WHERE engine_run_id = sqlc.arg(engine_run_id) AND seq = sqlc.arg(seq) AND once_key = '';
