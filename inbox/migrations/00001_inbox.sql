-- +goose Up
-- The inbox's state lives in the consumer's own database, beside the consumer's tables, so that one
-- transaction commits a line's effects and the inbox's record of it. Every table is bounded by the
-- runs and sources it has seen, never by the lines: a run keeps its high-water mark and the digests of
-- its last lines (the digest window), and nothing per line beyond them.

-- One row per run: hwm is the last seq applied (lines 1..hwm are applied or, past an accepted gap,
-- given up). applied_at (unix nanoseconds) is when the run last applied a line: a run idle past the
-- digest retention keeps only its last line's digest, and trimmed says that has been done.
CREATE TABLE inbox_runs (
    engine_run_id TEXT    NOT NULL PRIMARY KEY CHECK (engine_run_id <> ''),
    hwm           INTEGER NOT NULL CHECK (hwm >= 0),
    applied_at    INTEGER NOT NULL,
    trimmed       INTEGER NOT NULL DEFAULT 0 CHECK (trimmed IN (0, 1))
) WITHOUT ROWID;

-- The runs the retention trim still has to visit, oldest first. Partial: a trimmed run costs nothing
-- in it, and every query that wants it repeats `trimmed = 0`.
CREATE INDEX inbox_runs_untrimmed ON inbox_runs (applied_at) WHERE trimmed = 0;

-- The SHA-256 of each applied line in a run's window, (hwm - window, hwm], by seq: a re-delivered line
-- is a duplicate only with the same bytes, a conflict with others.
CREATE TABLE inbox_digests (
    engine_run_id TEXT    NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    digest        BLOB    NOT NULL CHECK (length(digest) = 32),
    PRIMARY KEY (engine_run_id, seq)
) WITHOUT ROWID;

-- A run parked by a gap, a conflict, or its handler: nothing more of it is applied until an operator
-- releases it (or accepts the gap). since is unix nanoseconds.
CREATE TABLE inbox_quarantine (
    engine_run_id TEXT    NOT NULL PRIMARY KEY,
    reason        TEXT    NOT NULL CHECK (reason IN ('gap', 'conflict', 'handler')),
    expected      INTEGER NOT NULL,
    got           INTEGER NOT NULL,
    detail        TEXT    NOT NULL,
    since         INTEGER NOT NULL
) WITHOUT ROWID;

-- The operators' decisions to give up seqs that cannot be had (AcceptGap): which run, which seqs,
-- why, who and when. One row per decision, kept for the record.
CREATE TABLE inbox_gaps_accepted (
    id          INTEGER PRIMARY KEY,
    engine_run_id TEXT  NOT NULL,
    first_seq   INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL CHECK (last_seq >= first_seq),
    reason      TEXT    NOT NULL,
    accepted_by TEXT    NOT NULL,
    accepted_at INTEGER NOT NULL
);

-- Each source's position (a file's, a stream's), in the source's own encoding, stored in the same
-- transaction as the effects of the lines it read. NULL: read again from the start (after a release).
CREATE TABLE inbox_sources (
    name       TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
    position   BLOB,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- +goose Down
DROP TABLE inbox_sources;
DROP TABLE inbox_gaps_accepted;
DROP TABLE inbox_quarantine;
DROP TABLE inbox_digests;
DROP INDEX inbox_runs_untrimmed;
DROP TABLE inbox_runs;
