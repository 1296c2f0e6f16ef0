// SPDX-License-Identifier: Apache-2.0

// Package inbox applies the lines of an outbox's journal exactly once into the consumer's own SQLite
// database: the other end of the seam, where a platform reads what an engine's relay projected.
//
// An Inbox lives in the consumer's database (never the book: Open refuses a database that holds an
// outbox's tables), beside the consumer's own tables, so that one SQLite transaction holds a line's
// effects and the inbox's record of it:
//
//	in, err := inbox.Open(ctx, "platform.db")
//	rep, err := in.Apply(ctx, lines, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO spend (run, seq, cents) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, cents(ev.Line))
//		return err
//	})
//
// # Handlers by event type
//
// A Router is the handler most consumers need: it reads each line's "type" and calls the Handler
// registered for it, and Decode gives that handler the line's "data" decoded into the consumer's own
// type, so that no consumer writes the envelope's decoding or a switch on the type:
//
//	r := inbox.NewRouter()
//	r.Handle("order_placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v OrderPlaced) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents) VALUES (?, ?)`, v.ID, v.Cents)
//		return err
//	}))
//	rep, err := in.Apply(ctx, lines, r.Route)
//
// A type without a handler stops the call by default (ErrUnknownType), as a handler's error does:
// nothing is skipped, and a consumer that knows the type goes on as if nothing had happened.
// WithUnknownType chooses to quarantine its run or to ignore it (applied, with nothing written)
// instead. Data that does not decode quarantines its run: the line's bytes never change, so no later
// attempt could decode them, and a stop would hold every run for one.
//
// A handler's error stops the call (fail-stop). WithRetry makes it run the handler again for the
// line, its writes undone each time, and quarantine the line's run alone after the last attempt,
// while the other runs go on.
//
// Package outboxtest opens an inbox in a test's temporary directory and feeds it lines from a
// slice, for testing handlers.
//
// # What it keeps
//
// Per run (engine_run_id): the high-water mark, the last seq applied; the SHA-256 digests of the last
// lines applied (4,096 by default, WithDigestWindow), so that a re-delivered line is recognised by
// its bytes; and a quarantine, if the run has one. Nothing per line beyond the window (the digests
// are stored 16 to a row, so the lowest row may still hold up to 15 older ones, never consulted):
// the tables grow with the runs, not with the journal. A run that has received nothing for the digest retention
// (24 hours by default, WithDigestRetention) keeps only its high-water mark and its last line's
// digest, trimmed a bounded amount per call. Sources that read the journal for the inbox (a file, a
// segmented journal's directory, a stream) keep their position in the same database, stored by
// ApplyFrom in the same transaction as the effects of the lines they read. One row counts the lines
// applied, duplicate, stale and quarantined (Totals), added to in each call's transaction: the
// counters an exporter reads (package github.com/textmachine/outbox/metrics).
//
// # Guarantees
//
//   - Exactly once into this database. A run's line seq is applied only when seq is its high-water
//     mark + 1, and the handler's writes, the new mark and the line's digest commit together or not
//     at all. Continuity is checked on each line's own (run, seq), never on a position in a file or
//     a stream.
//   - Nothing skipped. A line above the next seq quarantines its run ("gap"); a line within the
//     window with other bytes than those applied quarantines it ("conflict"); a handler returning an
//     error wrapping ErrQuarantine, or failing its last attempt under WithRetry, quarantines it
//     ("handler"). A quarantine is a row committed with
//     the call, durable; the run's later lines are counted Quarantined and not applied, while other
//     runs go on. Only an operator lifts it: Release (the run goes on from its mark + 1, and every
//     source is rewound: it reads again from its start, which deduplication makes safe) or, for a
//     gap that cannot be filled, AcceptGap, which records who gave up which seqs, when and why.
//   - A rewind gives up nothing. A rewound source keeps the position it had (SourceState) and
//     reads again from the start of what that position named, then on through everything the
//     position still needed: the file source reads the file it named (a rotated file it had not
//     finished) to its end before the path's file, or stops with ErrFileLost as before the rewind;
//     the stream source keeps it as the floor of its retention-gap check; the journal source
//     reads again from the first segment that can hold the next line of a run it needs (the seal
//     indexes say which), then on through everything the position still needed. So a Release
//     changes nothing for the other runs but lines read again and counted as Duplicates.
//   - Nothing applied twice. A line at or below the mark with the bytes applied is a duplicate; one
//     older than the window, or whose digest is no longer kept, is Stale: never applied, never
//     trusted as a duplicate either.
//   - Fail-stop. A line that is not a journal line (journal.LineKey's rules, a newline inside, over
//     the line limit) stops the call before anything is written (*LineError, wrapping
//     journal.ErrMalformed): the inbox never skips what it cannot attribute to a run. A handler's
//     error stops the call with nothing of it committed; calling again gives the same outcome
//     (unless WithRetry, which quarantines the line's run instead). A handler's panic rolls the call
//     back and reaches the caller as the same panic.
//   - One transaction and one WAL sync per call, whatever the number of lines (at the default
//     DurabilityFull, durable on return; DurabilityNormal can lose the last calls to a
//     power failure, and the sources then read their lines again). A cancelled or expired context
//     costs its own call only: an error means nothing of the call was committed, the Report
//     beside it is zero, and the error wraps the context's (whatever statement it interrupted). An
//     error wraps context.Canceled or context.DeadlineExceeded only when the caller's context ended.
//   - A full disk is errors.Is syscall.ENOSPC: every write (Apply, ApplyFrom, ApplyFile, FollowFile,
//     ApplyJournal, FollowJournal, WriteTx, Release, AcceptGap, AcceptRetentionGap), Open and RunLocked, with nothing of the failed transaction stored
//     and no seq or source position taken (ApplyFile's batches before it stay committed, as after
//     any error). The driver reports a real ENOSPC as a generic I/O error (SQLITE_IOERR;
//     at Open, "invalid _pragma"), so an I/O error while the file system holding the database has
//     less than 64 KiB available or no free inode is named a full disk.
//   - One writer. Open holds an exclusive lock on the database file; a second Inbox, in this process
//     or another, fails at once with ErrLocked. Calls that write are serialized; Position,
//     Quarantined, SourcePosition, SourceState, Sources and ReadTx (the platform's own reads) read on a
//     pool of their own (WAL mode) and never wait for a running Apply.
//
// # Failure model
//
// Exactly once covers the inbox's own database: what a handler writes through the transaction it is
// given. Its effects outside that transaction (a message sent, a file written) happen again when the
// line is applied again after a crash or a failed call: make them idempotent, or record them in the
// transaction and act on them afterwards. A handler must not commit or roll back the transaction,
// nor call the inbox (ErrTxEnded, ErrInHandler, ErrCallInsideTx); its own savepoints end with its
// line. A crash at any moment leaves each call committed whole or not at all, and a source resumes
// from the position committed with the last effects. The model in full is in [docs/RELIABILITY.md].
//
// # Segmented journals
//
// ApplyJournal and FollowJournal read a journal kept as a directory of segments (journal.Open), by
// segment name, exactly once as ApplyFile does, storing a JournalPosition: one journal-wide byte
// position, proven in the segment it was taken in (its first line, the line that ends at the
// position, every byte before it), so that a directory holding another journal is ErrJournalReplaced,
// never misread. They take part in the journal's retention:
//
//   - They register the position they committed with the journal (journal.SetReader) under the
//     inbox's reader name (WithReaderName; by default "inbox-", the database file's name and 12 hex
//     digits of the SHA-256 of its absolute path: stable across restarts, different for two
//     databases). The reader file is written at these moments, and only these: at the start of a
//     call and whenever it takes up a stored position again (a Release rewound it), at the position
//     it reads from; after a commit when the last write is 250 ms old or 16 MiB behind the committed
//     position (a long catch-up writes it a few times a second, not with two fsyncs after every
//     batch); at the end of every ApplyJournal, error or not, when it committed anything since; when
//     a FollowJournal has read all there is and nothing more came for the rest of the 250 ms since
//     its last write (it went idle); and when a FollowJournal returns. It is always written after
//     the commit it names, and a pending position is dropped, not written, when the stored position
//     is no longer the one the call committed (a Release rewound it): the file may lag the database
//     (retention then keeps more), never run ahead of it. The writes after a commit and on going
//     idle are made beside the reading, not by it: a line appended meanwhile is applied without
//     waiting for their fsyncs; each writes the newest position committed by then, once the
//     database is found to hold it, and the call returns only once the last one is written.
//   - They hold a shared flock on each segment they have open, for as long as it is open: retention
//     removes no segment a reader holds.
//   - A position below the first retained segment, or no position in a journal whose first segment
//     does not begin at byte 0, stops them with a *JournalGapError wrapping ErrRetentionGap (which
//     jetstream.ErrRetentionGap is too), naming what is gone and the runs it will not get as far as
//     the seal indexes tell: never a skip, never a silent start elsewhere. AcceptRetentionGap records
//     the operator's decision (AcceptedGaps) and goes on from the first retained segment; each run
//     that lost lines is then quarantined for a gap at its next line.
//   - A journal adopted from a file the inbox read (journal.Adopt) goes on from the file source's
//     position, carried over once, proven in the first segment.
//
// # Trace context
//
// A line may carry its producer's W3C trace context (journal.WithTraceContext). Event.TraceContext
// reads it, checked: a malformed one is the zero TraceContext, never an error, so a producer cannot
// stop the inbox with it. WithHandlerContext derives each handler's context from the event, which is
// where a tracer starts the line's span; package github.com/textmachine/outbox/otel does that with
// OpenTelemetry, a span linked to the producer's. Without the option the handler's context is the
// inbox's, as it always was.
//
// [docs/RELIABILITY.md]: https://github.com/textmachine/outbox/blob/main/docs/RELIABILITY.md#the-failure-model
package inbox
