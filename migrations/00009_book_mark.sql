-- +goose Up
-- Where the book last found its sink no further than itself: the sink's end at a book check that
-- passed, as the sink wrote it (an opaque mark: for a segmented journal, the journal-wide position
-- of its end and the digest of the line ending there). The next start asks the sink only for the runs
-- with lines after it. One row at most. Sound because the book's per-run figures only grow: a book
-- restored from a backup holds a mark no newer than its figures, and everything after it is checked.
CREATE TABLE outbox_book_mark (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    mark BLOB NOT NULL
);

-- +goose Down
-- Without the mark the next start compares every run the sink holds, as before it.
DROP TABLE outbox_book_mark;
