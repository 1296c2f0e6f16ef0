// SPDX-License-Identifier: Apache-2.0

// Package journal writes and checks the JSON-lines journal that an outbox relay projects to.
//
// # Format
//
// UTF-8 JSON Lines: one JSON object per line, each ending in "\n". Every line has a string member
// "engine_run_id" and an integer member "seq" (at least 1), each given once; the other members are
// the producer's, except that none may have a name that encoding/json folds to one of the two
// ("SEQ", "Seq", "ſeq", "Engine_Run_ID", escaped or not): a program that decodes a line into a
// struct tagged `json:"seq"` matches member names case-insensitively, with Unicode's simple folding,
// and would read another key than every reader of the journal.
// Builder renders the outbox's own lines:
//
//	{"engine_run_id":"…","seq":1,"type":"run_started","at":"2026-11-30T01:59:17.123456789Z","data":…}
//
// and Event renders the same bytes for the run of the enqueue it is passed to, so that the run id is
// named once: s.EnqueueTx(ctx, tx, runID, journal.Event("order_placed", v)).
//
// With WithTraceContext, the line carries the W3C trace context of the enqueue's caller in a
// "trace" member before "data" (see TraceMember):
//
//	{…,"at":…,"trace":{"traceparent":"00-…-…-01","tracestate":"…"},"data":…}
//
// The key rules ignore it, as they do every member of the producer's; LineTraceContext reads it back
// and reports a malformed one, which a reader drops rather than refusing the line.
//
// Under EnqueueOnce, Event (and Builder given WithOnceKey) writes the call's once key as a "once_key"
// member (OnceKeyMember) after "at":
//
//	{…,"at":…,"once_key":"order-42","data":…}
//
// so that a book restored without the keys it announced since can take them back from the journal
// (outbox reconcile, Reconcile). The key rules ignore it too; a line without it (every line written
// before it existed) is as valid as ever, and gives no key back. The name is the outbox's at the
// line's top level: a producer's own member of that name there would be read as a once key.
//
// A reader keys lines by (engine_run_id, seq). Each run's lines must come as 1, 2, 3, … (a missing seq
// is a stream gap, fatal to the reader); a line may come again only with the same bytes (a duplicate,
// skipped); the same seq with other bytes is a payload conflict. Runs interleave freely. A run id is
// compared after its escapes are decoded, so an escape that is not a character (a lone surrogate such
// as "\ud800", which decoders turn into U+FFFD) makes the line malformed: two runs never merge. A
// line is at most outbox.DefaultMaxLineSize bytes, the store's own limit.
//
// # Guarantees of File
//
//   - A batch is appended whole or not at all: a failed or short write is truncated back, and Append
//     returns nil only after fdatasync. A write refused for lack of space says so (errors.Is
//     syscall.ENOSPC, "no space left on device").
//   - After a failed fdatasync the File refuses appends (ErrFailed) until reopened: the kernel may
//     have dropped the unsynced pages and reported the error once.
//   - Each line is checked against its key before anything is written: a line that is not runID's
//     line of its EventLine.Seq, that is not a journal line, or that is longer than the limit, is
//     refused with an error wrapping outbox.ErrSinkRefused, and so is a batch that would leave a gap
//     in its run (ErrStreamGap): seqs that are not consecutive, or a first seq more than one past the
//     run's last seq in the file. A batch that starts at or before that seq is a re-delivery: each
//     of its lines that the file holds is compared with the file's copy, wherever in the file that
//     is, and one held with other bytes refuses the batch (ErrPayloadConflict, wrapping
//     outbox.ErrSinkRefused); a re-delivery that matches is appended (readers skip the duplicates).
//     LastSeq gives a run's last seq.
//   - The first Append or LastSeq after OpenFile reads the file once, forward, to index where each
//     run's lines are; after it a run's last seq is a lookup, and a re-delivery reads less than 1 MiB
//     before each copy it is compared with. The file is read in chunks of 1 MiB; a line up to the
//     limit grows the buffer to hold it, a longer one (no line the File wrote) is skipped without
//     being held. So every read ends, in time proportional to what it reads, and stops at its next
//     chunk when the call's context is done (Append, LastSeqContext) or Close is called; the next call
//     takes it up where it stopped.
//   - The index costs each run about 120 bytes and its id, and 24 bytes (48 at most, as its slice
//     grows) per span: a span is a run's consecutive seqs whose lines start within 1 MiB of its first,
//     whatever other runs' lines lie between. A run written in order costs one span per MiB of the
//     file it spans; a new span starts where its seqs do not follow on (a gap, or lines out of order:
//     at most one per line, in a file the File did not write). Copies of lines already indexed (a
//     re-delivery) cost nothing.
//   - OpenFile opens only a regular file: a directory, a FIFO, a device or a socket is ErrNotJournal,
//     refused from a stat of the path before anything opens it (opening a FIFO would wait for a
//     writer, opening a device can act on it); the open does not block either, and what it opened is
//     checked to be the file looked at.
//   - OpenFile opens only a journal: an empty or new file, or one whose first and last complete lines
//     are journal lines, whose torn tail (if any) begins with '{', and where what it reads holds no
//     NUL byte. Anything else (a database, a log, a file of NUL bytes left by a copytruncate, or by a
//     file system after a power cut) is ErrNotJournal, left as it was and never locked: what is not
//     a journal line is for an operator to look at and cut, not for the File to guess about. So that
//     a torn line can be told from one, Append takes only lines that begin with '{'.
//   - OpenFile cuts a torn last line (one without its newline, never acknowledged), syncs the
//     directory of a file it creates, and holds an exclusive flock, so two Files cannot interleave.
//   - Before each append the File checks that its path still names the file and that the file still
//     ends where its last append left it (its length and its last bytes). A program that appended to
//     it, truncated it or moved it away makes Append refuse (ErrModified, wrapping
//     outbox.ErrSinkRefused) without writing, so its bytes are not overwritten, no hole of NUL bytes
//     is left, and no line goes to a file the path no longer names.
//
// # Segments
//
// Open keeps a journal as a directory of segment files, each named by the journal-wide byte
// position of its first byte, in 20 digits (00000000000000000000.jsonl, 00000000000134217800.jsonl,
// …), so that `cat DIR/*.jsonl` is the journal in order and a position is one number. The highest
// segment is the one appended to. A batch goes whole into one segment: when it would take the last
// segment past the segment size (WithSegmentSize, DefaultSegmentSize by default), that segment is
// sealed and the batch begins the next, so a segment exceeds the size only when it holds one batch
// (or one line) larger than it. A sealed segment is never renamed, rewritten or appended to.
//
// Sealing writes the segment's index beside it (00000000000000000000.idx): a header line
// ("outbox journal segment index 2"), then varints: the segment's position, its size, its
// modification time in nanoseconds since 1970 (signed, zig-zag), where its last line starts (from the segment's first byte), then the SHA-256 of that last line, then
// the number of runs and, per run in byte order of its id, the id's length and bytes, the number of
// its spans and each span's first seq, offset (from the segment's first byte), number of seqs and
// length in bytes (a span as File's run index keeps it: consecutive seqs whose lines start within
// 1 MiB of its first); the file ends with the SHA-256 of all that precedes it. A run's first and
// last seq in the segment are its first span's seq and its last span's last, and the spans say
// where in the segment a seq lies. The index is written to a temporary name, synced, renamed and the
// directory synced, before the next segment is created (and the directory synced again).
//
// Open reads the directory's names and opens the last segment, cutting its torn tail; it reads no
// sealed segment. A sealed segment's size must end where the next one's name begins, or another
// program appended to it or cut it (ErrModified). The first Append or LastSeq reads each sealed
// segment's index and trusts it only when it is that segment's index as the segment is now: its
// checksum holds, its position, size and modification time are the segment's, and the digest of
// the segment's last line, read alone, is the one it records. Any other (missing, torn, another
// segment's, another journal's segment's of the same position, size and last line, left by a crash
// before a segment grew, or after a copy that did not keep the files' times) is rebuilt from that segment alone, read once, and written again;
// an index beside the last segment (a crash came between writing it and starting the next segment)
// is removed at Open, since that segment is appended to. Then it reads the last segment. A start
// therefore reads the indexes and at most a segment of lines, whatever the journal's length.
//
// A Journal makes every check a File makes, against the whole retained journal (a re-delivery is
// compared with its copies in whichever segments hold them), with the same failure model: a batch
// whole or not at all, fdatasync before Append returns, ErrFailed after a failed fdatasync, the
// last segment's torn tail cut at Open, an exclusive flock on the directory (ErrLocked), and
// another program's write to the last segment refused before each append (ErrModified); a write to
// a sealed segment is found when the journal is opened or the segment read. A directory that holds
// anything but segments, their indexes and an index's temporary file left by a crash is
// ErrNotJournal, and so is a path that is not a directory (a single-file journal is carried over
// by `outbox journal adopt FILE DIR`). The run index in memory costs what File's costs for the same
// lines.
//
// # Verify
//
// Verify checks a journal against the reader's rules and reports what it accepted. A line longer than
// the limit (WithMaxLineSize, outbox.DefaultMaxLineSize by default, at most MaxLineSizeLimit) is
// ErrMalformed "line too long", found while reading, without holding more of it than the limit. Its
// memory is bounded by the journal's lines and runs: 8 bytes per line read from a file (32 from a
// stream that cannot be read back) and about 200 bytes per run.
package journal
