-- +goose Up
-- The ledger keeps the key, not the line. Once a once-keyed line is projected, its row keeps what the
-- announce-once protocol and a cross-check of the book against its journal need: the key, the run,
-- the seq, and in digest the first 8 bytes of the line's SHA-256 (outbox.LineDigest). Its line,
-- its pending announce key (the ledger's index holds the key) and its enqueue time go, and so does a
-- large line's events_lines row: the row is deleted and inserted again without them (see
-- queries/outbox_ledger.sql for why not an UPDATE). A row of the ledger then costs about 150 bytes
-- of book whatever its line was (docs/BENCHMARKS.md), where it kept its whole line for the life of
-- the book.
--
-- digest is NULL while the row holds its line; 8 bytes once the line is gone; empty when the line
-- went without a digest (a book migrated down past this version and up again: see the Down step).
-- The SHA-256 is computed by the store, in Go, so this migration converts nothing itself: a rewrite
-- of every ledger row in one transaction would put the whole ledger in the WAL at once. The store
-- converts the rows this index lists in bounded steps (Relay.Recover), and the relay empties each
-- new ledger row in the transaction that records its line projected, so the index stays empty.
ALTER TABLE events_outbox ADD COLUMN digest BLOB;
CREATE INDEX events_outbox_ledger_lines ON events_outbox (engine_run_id, seq) WHERE once_key <> '' AND digest IS NULL;

-- +goose Down
-- The bytes of the lines this version emptied cannot come back: they are in the journal only. Every
-- key, run and seq stays, so the ledger refuses a second announcement as before, and an older release
-- never sends those lines again (each is at or below its run's projected position, and a ledger row
-- counts as projected when positions are rebuilt). Their rows keep an empty line, which no enqueue
-- can store: an older release's `outbox check` reports each as differing from the journal. The
-- digests go with their column; migrated up again, those rows are marked as having none (an empty
-- digest), and check compares nothing for them.
DROP INDEX events_outbox_ledger_lines;
ALTER TABLE events_outbox DROP COLUMN digest;
