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
// skipped); the same seq with other bytes is a payload conflict. Runs interleave freely.
//
// # Guarantees of File
//
//   - A batch is appended whole or not at all: a failed or short write is truncated back, and Append
//     returns nil only after fdatasync.
//   - After a failed fdatasync the File refuses appends (ErrFailed) until reopened: the kernel may
//     have dropped the unsynced pages and reported the error once.
//   - OpenFile cuts a torn last line (one without its newline, never acknowledged), syncs the
//     directory of a file it creates, and holds an exclusive flock, so two writers cannot interleave.
//
// Verify checks a journal against the reader's rules and reports what it accepted.
package journal
