// Package journal writes and checks the JSON-lines journal that an outbox relay projects to.
//
// # Format
//
// UTF-8 JSON Lines: one JSON object per line, each ending in "\n". Every line has a string member
// "engine_run_id" and an integer member "seq" (at least 1); the other members are the producer's.
// Builder renders the outbox's own lines:
//
//	{"engine_run_id":"…","seq":1,"type":"run_started","at":"2026-11-30T01:59:17.123456789Z","data":…}
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
//     run's last seq in the file. A batch that starts at or before that seq is a re-delivery and is
//     appended. Each run's last seq is remembered from the appends and from reading the file back
//     from its end, lazily: the file is read at most once while it is open, and an append to a run
//     the File has appended to or read costs no read. LastSeq gives it.
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
// # Verify
//
// Verify checks a journal against the reader's rules and reports what it accepted. A line longer than
// the limit (WithMaxLineSize, outbox.DefaultMaxLineSize by default, at most MaxLineSizeLimit) is
// ErrMalformed "line too long", found while reading, without holding more of it than the limit. Its
// memory is bounded by the journal's lines and runs: 8 bytes per line read from a file (32 from a
// stream that cannot be read back) and about 200 bytes per run.
package journal
