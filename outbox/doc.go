// SPDX-License-Identifier: Apache-2.0

// Package outbox is a transactional event outbox on SQLite: an event is a row committed in the same
// transaction as the state change it describes, and a Relay later appends the rows, in order, to a
// sink (a journal file, a broker) that a reader keys by (engine_run_id, seq).
//
// # Guarantees
//
//   - Dense numbers. Each run's events are numbered 1, 2, 3, … with no hole. The number is assigned
//     inside the write transaction, under the store's single writer connection, so a transaction that
//     rolls back (a failing or panicking EventBuilder, a cancelled context, a caller's WriteTx that
//     returns an error) consumes no number.
//   - Exact bytes. A line is stored as the EventBuilder rendered it, and read back byte for byte, so a
//     retried projection re-sends the identical line: the reader treats the same seq with other bytes
//     as a conflict. A line must be non-empty and hold no newline (ErrInvalidLine).
//   - Atomic with the caller's writes. WriteTx with EnqueueTx commits the caller's own rows and the
//     event together or not at all.
//   - Durable on return. Every commit is durable before the call returns unless the caller opts into
//     DurabilityNormal. The store syncs the WAL itself after each commit, outside SQLite's write lock,
//     which is what synchronous=FULL does inside it; so while one commit waits for the disk, the next
//     is written, and one fdatasync covers every caller waiting by then. Concurrent EnqueueEvent and
//     EnqueueOnce calls also share one transaction (group commit); a builder that fails or panics
//     undoes only its own call. Concurrent calls have no order among themselves. A group ends at the
//     line that takes it to 1 MiB, so a small call beside a producer of large lines waits for about
//     one or two large writes, never for a group of them. A commit is visible to readers a moment before it is durable, and
//     nothing is projected before it is durable.
//   - Announce once. EnqueueOnce stores its key with the line and refuses a key that is pending or in
//     the ledger: one row per key for the life of the book. The key enters the ledger when the relay
//     records that the line reached the sink, and its row then keeps the key, run, seq and the line's
//     digest (LineDigest), not the line: the book grows by about 150 bytes a key, not by its lines.
//   - Nothing lost, nothing counted twice. The relay appends a batch to the sink and only then records
//     how far it got (and moves the batch's keys into the ledger), before it reads the next batch, so a
//     crash re-sends at most the one batch in flight, byte for byte, which the reader skips as
//     duplicates. A record that fails after the append is retried alone, never by appending the batch
//     again. Relay.Recover projects what
//     earlier processes committed and drops only rows whose lines the sink has; it never touches a run
//     this Store has enqueued to.
//   - A book behind its sink stops the relay. A relay whose sink lists its runs (RunLister) compares
//     them with the book at its first call, a point lookup a run, and stops with ErrBookBehind,
//     before it appends anything, when the sink holds a run the book never recorded or holds a run
//     further than the highest seq the book gave it (a book restored from an older backup). The book
//     keeps each run's row of figures for its life, its rows forgotten or not, so it knows every run
//     it ever projected. A sink that is a SinceLister (the journal) lets the check stay small: the
//     book keeps the sink's end at the last check that passed (a mark the sink proves its own), and
//     the next start compares only the runs with lines after it; a mark the sink cannot prove (another
//     sink, a restored older copy, a place retention deleted) makes that start compare every run.
//   - One projection at a time per run. Relays of one Store that project the same run take turns
//     (a waiting relay gives up when its context ends), so no line is appended twice by them, and a
//     batch whose record failed is recorded by whichever relay takes the run next, not appended again.
//   - Memory bounded by configuration. A relay holds at most WithBatchBytes (4 MiB by default) of
//     lines, the one batch it appends, plus one line: a batch
//     always holds at least one line, so a longer line goes alone. WithBatchSize bounds a batch's
//     lines as well.
//   - No number reused. A run's next seq follows the highest it was ever given, also after its rows
//     were dropped (ForgetEvents, Recover): the reader would take a second line under a seq it has as
//     a conflict.
//   - Keys checked at the sink, and at the source on request. The store keeps lines opaque; a Sink
//     refuses a line whose own engine_run_id or seq is not its row's, so a builder that writes the
//     wrong key cannot make an event vanish as a duplicate of another. WithLineCheck
//     (journal.CheckLine) refuses such a line at its enqueue instead (ErrInvalidLine), storing nothing.
//   - Well-formed ids. A run id is valid UTF-8 without control characters, at most MaxRunIDLen bytes
//     (ErrInvalidRunID); a once key the same, at most MaxOnceKeyLen bytes (ErrInvalidOnceKey). A line
//     is at most WithMaxLineSize bytes (16 MiB by default). Nothing of a refused call is stored.
//   - Exact figures. Each run's figures (the highest seq given, how far it is projected and
//     forgotten, its stored rows and ledger rows), which listing, Totals, OpenRuns, Run and Recover
//     read instead of the rows, are exact at every commit, whoever writes. They are its row in
//     outbox_runs as of counted_to, plus its tail: the lines the store enqueued after counted_to,
//     which every reader adds at its snapshot (the view outbox_run_figures, migration 10), so that a
//     commit of one event writes no page of the run's row. The store folds the tail into the row in
//     a commit that makes the row, enqueues to a run recovery has unmarked, or would leave a tail of
//     256 seqs; the relay's record folds it at every batch, and forgetting before it deletes. What
//     is folded is read from the rows, so that neither a transaction that rolls back nor a WriteTx
//     function that deletes a line it enqueued or rolls back to a savepoint moves a figure wrongly.
//     Its rows are marked (events_outbox.counted) so that the insert trigger passes them by; a row
//     inserted by anything else (plain SQL inside WriteTx,
//     the sqlite3 shell, a release before migration 7) is counted by that trigger, and every delete
//     and every change of a ledger key, the store's own included, by triggers in the same
//     transaction. Counting per line in a trigger cost an enqueue a third of its time or more, and
//     writing the run's row at every commit one page of WAL a commit (docs/BENCHMARKS.md).
//   - One writer, one name. Open takes an exclusive lock on the database file (flock on its own
//     descriptor), so a second Open, in this process or another, fails at once with ErrLocked.
//     OpenReadOnly takes none. Open refuses a file with more than one hard link (ErrHardLinked):
//     SQLite gives each name its own -wal, so two names fork the book after a crash.
//   - Readers write nothing. A store from OpenReadOnly (and a *sql.DB from OpenReadOnlyDB) needs
//     write access to nothing: it opens the database and its -wal read-only, and creates no file.
//     Beside a running writer it reads the writer's commits through its WAL and -shm, as an SQLite
//     reader does (writing read marks in the -shm where the user may write it, reading it
//     read-only where not), never a mix of two commits. A book no
//     writer holds open, a crashed one with its -wal included, it leaves exactly as it was, creating
//     no file: without a -wal it reads the file as immutable under a SHARED lock; with one, it builds
//     the WAL index in its own memory while holding the -shm's WAL_READ_LOCK(0), which stops any
//     writer's checkpoint, or, without a -shm, checking on every read that no writer has created
//     one. A read that meets a writer opening the book meanwhile fails with ErrBookOpened, and the
//     same read again succeeds. (On Linux; elsewhere a book with a -wal is read as SQLite reads it.)
//   - Regular files only. Open, OpenReadOnly and OpenReadOnlyDB refuse, at once and without
//     blocking, a path that is a named pipe, a directory, a device or a socket, and every connection
//     checks that SQLite opened the file that was checked.
//   - The schema it expects. Open, OpenReadOnly and Migrate refuse a book migrated by a newer release
//     or missing a table, column or unique index the protocol relies on (ErrSchemaMismatch).
//
// # Failure model
//
// A failed call leaves nothing behind (no row, no used number, no open transaction), except
// ErrNotDurable: its commit was made, a sync of the WAL failed, and its seq comes with the error. A
// context that ends at any moment of a call fails that call and no other, and the store stays
// usable; an error wraps the context's only when the caller's own context ended or the operation
// timeout passed. Errors that callers branch on are sentinels, found with errors.Is. A sink that
// fails is retried; one that refuses a batch for good (ErrSinkRefused) stops the relay, the refusal
// recorded in the book until the run projects again (RetireEvent). The model in full (builders that
// never return, a panic inside SQLite, a full disk, a failed sync, power loss, resources, Close) is
// in [docs/RELIABILITY.md].
//
// The store logs nothing unless given a logger (WithLogger). The schema is created and evolved by the
// goose migrations in package migrations, which Open applies. Network file systems are not
// supported: the writer lock and SQLite's own locking need a local file system.
//
// [docs/RELIABILITY.md]: https://github.com/textmachine/outbox/blob/main/docs/RELIABILITY.md#the-failure-model
package outbox
