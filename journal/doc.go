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
//     checked to be the file looked at. Nor does it open a file named as a segment of a journal
//     directory (%020d.jsonl, see Segments): only the directory's Journal writes a segment.
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
// The failure model of the whole path, the journal's part in it included (what a crash, a power cut,
// an I/O error, a full disk or a torn line costs, as tested), is in [docs/RELIABILITY.md].
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
// then it reads the last segment, from its checkpoint on.
//
// So that a start does not read an index file per sealed segment (thousands after a year), the
// sealed segments' indexes are also kept together in the seal summary (seals.summary): a header
// line ("outbox journal seal summary 1"), then varints: the number of records and, per record, the
// inode number of the segment file it was written for, the length of the segment's index and the
// index as its .idx file holds it (its own checksum included); the file ends with the SHA-256 of
// all that precedes it. It is written, as durably as an index, by the append that seals the 64th
// segment it leaves out, and by a start that had to read 64 index files one by one; it is an aid,
// never a record: a failure to write it fails nothing. A start reads it once and trusts a record
// only when the summary's checksum holds and the segment file is the one the record was written
// for, as Open found it: the same position, size, modification time and inode (a sealed segment is
// never written again, so its record stays true while its file is the same; a copy of the
// directory is new files). Any other segment's index is read from its .idx file, as above. A start
// therefore reads one summary and fewer than 64 index files, whatever the number of segments; Open
// still lists the directory and looks up each sealed segment's size.
//
// The last segment is checkpointed as it grows: once 16 MiB (WithCheckpointEvery) have been appended to it since its last
// checkpoint (or since it was started), the append that passed the mark writes the segment's index
// as it is then beside it, under the segment's .idx name, as durably as a seal index (temporary
// name, synced, renamed, the directory synced), with its own header line ("outbox journal tail
// checkpoint 1") and, in the modification time's place, the segment file's inode number (unsigned; a growing
// segment's time moves with every append). Sealing the segment replaces it with the seal index. A
// checkpoint is an aid, never a record: a failure to write one does not fail the append, whose batch
// is already durable, and is tried again 16 MiB later. Open trusts the checkpoint beside the last
// segment only when its checksum holds, it names the segment's position and file (the inode: a copy
// of the directory, with or without its times, is new files), it covers no more than the segment's
// complete lines, and the line it says its part ends with, read alone, has the digest it records.
// Any other (torn, a seal index left by a crash between sealing and starting the next segment,
// another segment's or journal's, a copy's, one whose part was cut back below it or rewritten) is
// removed and the segment read whole, after which a new checkpoint is written. A start therefore
// reads the indexes, the checkpoint and at most 16 MiB of lines, whatever the journal's and the
// segment's length; a start after a copy or a crash that left no checkpoint reads at most a segment.
// Like a seal index, a checkpoint cannot tell a program that rewrote the lines before its end in
// place, keeping the line it ends with: never write to a journal's files.
//
// A Journal makes every check a File makes, against the whole retained journal (a re-delivery is
// compared with its copies in whichever segments hold them), with the same failure model: a batch
// whole or not at all, fdatasync before Append returns, ErrFailed after a failed fdatasync, the
// last segment's torn tail cut at Open, an exclusive flock on the directory (ErrLocked), and
// another program's write to the last segment refused before each append (ErrModified); a write to
// a sealed segment is found when the journal is opened or the segment read. A directory that holds
// anything but segments, their indexes (the last segment's checkpoint among them), the seal summary,
// readers' files, the retention record (see Retention) and the temporary files of their writes is ErrNotJournal,
// and so is a path that is not a directory (a single-file journal is carried over
// by `outbox journal adopt FILE DIR`). The run index in memory costs what File's costs for the same
// lines.
//
// # Retention
//
// A reader of a journal directory registers the position it has committed with SetReader: one file
// per reader, NAME.reader, holding one checksummed line, written to a temporary name
// (NAME.reader.tmp.DIGITS), synced, renamed and the directory synced, so that it holds the old
// position or the new one. A torn or foreign reader file is an error naming it, never a position:
// a trim with one deletes only what the cap takes, and returns that error. A reader's file may lag
// what the reader applied (retention keeps more); it must never run ahead. A reader name is 1 to
// 64 bytes of [A-Za-z0-9._-], not starting with '.' (ErrReaderName), so that it names nothing but
// its file. RemoveReader refuses a reader that has not applied the whole journal unless forced
// (ErrReaderBehind). Status reports the segments, each reader's lag and what a trim would delete
// and why not yet; Stats gives a Journal's figures for metrics.
//
// Retention is off unless WithKeep or WithMaxBytes is given; then the Journal trims after each
// seal, and Trim (a Journal's, or the package's, which takes the directory's lock and is ErrLocked
// while a Journal has it) trims on demand. A trim looks at the sealed segments oldest first and
// stops at the first that must stay; the last segment is never deleted. A sealed segment goes when
// every registered reader's position is at or past its end and it was sealed (its modification
// time) at least the keep duration ago. A journal with no registered reader is kept by the keep
// duration alone: register every reader. A reader position past the journal's end says nothing
// about what that reader read, and keeps every segment. Past WithMaxBytes (the sum of the
// segments' sizes, the last counted as full, so that the journal stays under the cap between
// seals too), the oldest sealed segments go whatever the readers and the keep duration say, logged
// at Error with the readers left behind and counted (TrimReport.UnderCap, Stats.DeletedUnderCap).
// No segment a reader holds open is ever deleted: a reader holds flock(LOCK_SH) on every segment
// it has open, and a trim takes flock(LOCK_EX|LOCK_NB) on each segment before unlinking it and
// keeps it, and every later one, when that is refused. On systems without flock, Open, and so
// Trim, are refused.
//
// The directory's retention record (retention.state, one checksummed file written as an index is)
// says where the last segment began when the journal last rolled to it, what retention deleted
// (every segment before a position), its totals, and the runs whose lines it deleted with the last
// seq of each it deleted, for the most recently deleted segments' 1000 runs at most (the number of
// runs no longer listed is kept). Retained reports it with the first retained byte. A delete locks
// its segments, writes the record, then unlinks each segment and after it its index, and syncs the
// directory: a crash before the record leaves the segments, after it leaves segments the record
// says are deleted, which the next trim deletes (Open takes them as the journal's), and between a
// segment and its index leaves an index without its segment, which Open removes. So a crash at any
// step leaves a journal that opens, appends and reads. Open refuses (ErrModified) a directory whose
// first segment begins after what the record says retention deleted (segments deleted by hand at
// the front; without a record, a first segment that is not at byte 0), and one whose last segment
// begins before where the record says the journal rolled to (a last segment deleted by hand);
// AcceptMissing records such a loss, under the directory's lock, so that the journal opens again. A
// run whose lines retention deleted keeps its last seq (LastSeq, the checks of the next batch), and
// a re-delivery of those lines is taken without a comparison: there is no copy left to compare it
// with.
//
// # Verify
//
// Verify checks a journal against the reader's rules and reports what it accepted; VerifyDir reads a
// journal directory's segments in the order of their names, as one journal, and names the segment
// and its line with a finding. A line longer than the limit (WithMaxLineSize,
// outbox.DefaultMaxLineSize by default, at most MaxLineSizeLimit) is ErrMalformed "line too long",
// found while reading, without holding more of it than the limit.
//
// Its memory is bounded per run, not per line: a run costs about 200 bytes, and the 256 runs
// appended to most recently keep a 64-bit hash of the line of each of their last seqs (the repeat
// window, DefaultRepeatWindow: two relay batches), at most 1 MiB; the hash is hash/maphash's under a
// seed chosen at random for each Verifier, so that no writer can aim a conflicting line at it. A
// re-delivery of a seq within the window is compared with the first copy by that hash; the relay re-sends only the batches it had in flight, so that is
// where a legitimate one lies. An older repeat is checked by its key (the run already has that seq)
// and counted in Report.Unchecked, its bytes not compared. Every other rule (each run from seq 1 up
// by one, every line well formed) holds for the whole journal.
//
// [docs/RELIABILITY.md]: https://github.com/textmachine/outbox/blob/main/docs/RELIABILITY.md
package journal
