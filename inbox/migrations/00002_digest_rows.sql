-- +goose Up
-- A run's digests in rows of 16: row `chunk` holds the SHA-256 sums of the run's lines from first_seq
-- on, one after the other, all inside seqs chunk*16+1 .. chunk*16+16. A line applied is appended to
-- its row in place, and the window moves by dropping whole rows, so that a batch of lines costs a few
-- row writes, not an insert and a delete per line: the per-line rows cost more than the rest of the
-- inbox's bookkeeping together (docs/BENCHMARKS.md, "The inbox"). Sixteen sums (512 bytes) keep a row
-- inside its b-tree page with any run id the outbox gives (up to 256 bytes); a WITHOUT ROWID row over
-- about 1,000 bytes spills into an overflow page of its own. The row size is part of the format: the
-- inbox computes the same chunks (inbox/txn.go, digestsPerRow).
--
-- A seq given up by an accepted gap between two applied lines of one row holds 32 zero bytes: no line
-- has that SHA-256, and the inbox reads it as a digest it does not keep. A lookup checks that the seq
-- is inside its row's first_seq and length, so a row only ever answers for the lines it holds.
ALTER TABLE inbox_digests RENAME TO inbox_digests_v1;

CREATE TABLE inbox_digests (
    engine_run_id TEXT    NOT NULL,
    chunk         INTEGER NOT NULL CHECK (chunk >= 0),
    first_seq     INTEGER NOT NULL CHECK ((first_seq - 1) / 16 = chunk),
    digests       BLOB    NOT NULL CHECK (typeof(digests) = 'blob' AND length(digests) % 32 = 0
                                          AND length(digests) >= 32
                                          AND (first_seq - 2 + length(digests) / 32) / 16 = chunk),
    PRIMARY KEY (engine_run_id, chunk)
) WITHOUT ROWID;

-- Each row of the old shape carried over: the sums of a row's seqs in order, a seq missing between two
-- of them (an accepted gap) as zeros.
INSERT INTO inbox_digests (engine_run_id, chunk, first_seq, digests)
WITH RECURSIVE acc (engine_run_id, chunk, first_seq, seq, last_seq, digests) AS (
    SELECT v.engine_run_id, (v.seq - 1) / 16, v.seq, v.seq, b.last_seq, v.digest
    FROM (SELECT engine_run_id, min(seq) AS first_seq, max(seq) AS last_seq
          FROM inbox_digests_v1 GROUP BY engine_run_id, (seq - 1) / 16) AS b
    JOIN inbox_digests_v1 AS v ON v.engine_run_id = b.engine_run_id AND v.seq = b.first_seq
    UNION ALL
    SELECT a.engine_run_id, a.chunk, a.first_seq, a.seq + 1, a.last_seq,
           CAST(a.digests || coalesce((SELECT n.digest FROM inbox_digests_v1 AS n
                                      WHERE n.engine_run_id = a.engine_run_id AND n.seq = a.seq + 1), zeroblob(32)) AS BLOB)
    FROM acc AS a
    WHERE a.seq < a.last_seq
)
SELECT engine_run_id, chunk, first_seq, digests FROM acc WHERE seq = last_seq;

DROP TABLE inbox_digests_v1;

-- +goose Down
-- Back to a row per digest; the zeros of a seq given up are no digest.
CREATE TABLE inbox_digests_v1 (
    engine_run_id TEXT    NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    digest        BLOB    NOT NULL CHECK (length(digest) = 32),
    PRIMARY KEY (engine_run_id, seq)
) WITHOUT ROWID;

INSERT INTO inbox_digests_v1 (engine_run_id, seq, digest)
WITH RECURSIVE one (engine_run_id, seq, i, n, digests) AS (
    SELECT engine_run_id, first_seq, 0, length(digests) / 32, digests FROM inbox_digests
    UNION ALL
    SELECT engine_run_id, seq + 1, i + 1, n, digests FROM one WHERE i + 1 < n
)
SELECT engine_run_id, seq, substr(digests, i * 32 + 1, 32) FROM one
WHERE substr(digests, i * 32 + 1, 32) <> zeroblob(32);

DROP TABLE inbox_digests;
ALTER TABLE inbox_digests_v1 RENAME TO inbox_digests;
