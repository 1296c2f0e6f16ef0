-- +goose Up
-- One row per journal line. The primary key is the reader's key, (engine_run_id, seq), and it is the
-- only access path the hot queries use: next-seq is MAX(seq) over a key prefix and a pending read is a
-- range over it.
--
-- WITHOUT ROWID: a rowid table keeps the rows in one b-tree and the primary key in a second one, so
-- every enqueue writes both and every pending read goes through the index and back to the table. As a
-- clustered table the key is the storage. Measured on 200-byte lines with synchronous=NORMAL (the
-- fsync hides everything at FULL): enqueue ~10% faster, pending reads ~25% faster, file ~30% smaller,
-- at 10k and at 1M rows (docs/BENCHMARKS.md). Lines far larger than a page spill to overflow pages in
-- either layout, so the usual caveat about wide rows in WITHOUT ROWID tables costs nothing here.
CREATE TABLE events_outbox (
    engine_run_id TEXT    NOT NULL CHECK (engine_run_id <> ''),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    line          BLOB    NOT NULL,
    once_key      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (engine_run_id, seq)
) WITHOUT ROWID;

-- The announce-once ledger. Partial, so the many rows without a key cost nothing in it; every query
-- that wants this index must repeat `once_key <> ''` literally, because SQLite only uses a partial
-- index when the query's WHERE implies the index's WHERE syntactically.
CREATE UNIQUE INDEX events_outbox_once_key ON events_outbox (once_key) WHERE once_key <> '';

-- +goose Down
DROP INDEX events_outbox_once_key;
DROP TABLE events_outbox;
