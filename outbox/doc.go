// Package outbox is a transactional event outbox on SQLite: an event is a row committed in the same
// transaction as the state change it describes, and a relay later appends the rows, in order, to a
// JSON-lines journal that a reader keys by (engine_run_id, seq).
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
//   - Announce once. EnqueueOnce and MarkAnnounced keep a ledger of once keys on a partial unique
//     index: a key enters the ledger after its line has reached the journal, and EnqueueOnce does not
//     enqueue a key the ledger holds.
//   - One writer. Open takes an exclusive lock on the database file (flock on its own descriptor), so a
//     second Open, in this process or another, fails at once with ErrLocked. OpenReadOnly takes none.
//   - Durability. Every commit is durable on return (synchronous=FULL) unless the caller opts into
//     DurabilityNormal.
//
// # Failure model
//
// Every method that touches the database takes a context; a context without a deadline gets the
// operation timeout (WithOpTimeout). A failed call leaves nothing behind: no row, no used number, no
// open transaction. Errors that callers branch on are sentinels (ErrEmptyRunID, ErrLocked, …) found
// with errors.Is; everything else is wrapped with what was being done. A process that dies mid-call
// loses only its uncommitted transaction: SQLite's WAL makes the commit atomic. The store logs
// nothing unless given a logger (WithLogger).
//
// The schema is created and evolved by the goose migrations in package migrations, which Open applies.
// Network file systems are not supported: the writer lock and SQLite's own locking need a local file
// system.
package outbox
