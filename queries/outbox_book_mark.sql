-- name: BookMarkGet :one
-- The sink's end at the last book check that passed (migrations/00009).
SELECT mark FROM outbox_book_mark WHERE id = 1;

-- name: BookMarkPut :exec
-- Records the sink's end at a book check that passed, in place of the one before.
INSERT INTO outbox_book_mark (id, mark) VALUES (1, sqlc.arg(mark))
ON CONFLICT (id) DO UPDATE SET mark = excluded.mark;
