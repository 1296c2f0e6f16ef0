// SPDX-License-Identifier: Apache-2.0

// Package jetstream projects an outbox to a NATS JetStream stream, checks such a stream, and reads it
// into a platform's inbox exactly once, so that engines on many machines can feed one platform
// through a broker instead of files.
//
// # Guarantees
//
//   - No gap enters the stream: every publication expects the stream sequence of its run's previous
//     line, so the server refuses a line out of place, and an atomic batch is stored whole or not at
//     all.
//   - A re-delivery is compared, not published again: a line the stream holds with the same bytes is
//     success, with other bytes a conflict that stops the run's projection (ErrConflict).
//   - A batch is refused whole, before anything of it is published, when a line is not its row's, holds
//     a newline, skips a seq or exceeds the server's limits (errors wrapping outbox.ErrSinkRefused).
//   - Distinct run ids get distinct subjects and Msg-Ids.
//   - Nothing is removed behind a reader: Trim removes only what every registered reader applied, and
//     its hard cap stops each reader it leaves behind with ErrRetentionGap, never a skip.
//   - ApplyStream and FollowStream apply a stream into an inbox exactly once, its position committed
//     with the effects; a message missing from the middle quarantines its run, never skipped.
//
// What an acknowledged line survives is under Durability below; the failure model of the whole
// path, a server restarted and a stream leader killed included, is in [docs/RELIABILITY.md].
//
// # What the broker enforces
//
// Each run's lines go to their own subject, <prefix>.<token>, where the token is the run id with every
// byte but letters, digits, '-' and '_' written as '~' and two hex digits (Token). Every line is
// published with Nats-Msg-Id "<token>:<seq>", and each publication (one line, or an atomic batch's
// first line) carries Nats-Expected-Last-Subject-Sequence set to the stream sequence of the run's
// previous line, so the server itself refuses a line whose predecessor is not the one the sink placed:
// no gap can enter the stream, whatever the sink believes.
//
// On a stream with atomic publish (nats-server 2.12 or later, stream setting AllowAtomicPublish, which
// CreateStream sets), each Append is published as atomic batches of up to the server's batch limit
// (1,000 messages by default; a lower limit the server reports is learned and used): the stream stores
// a batch all together or not at all, and the batch's first message carries the expected last subject
// sequence, so the broker refuses a gap and half a batch alike. Batches of one run follow each other
// (the next batch's expectation is the stream sequence the previous one ended at); Append returns once
// its last batch is acknowledged. On a stream without atomic publish the sink falls back to one line at
// a time, each waiting for its acknowledgement, because a window of asynchronous publishes would have
// to drop the expectation from all but the first line and a failure inside the window would let later
// lines in behind a hole. Mode says which path a sink uses; BatchSize says what relay batch suits it.
//
// # Re-deliveries
//
// A relay re-sends a batch it could not record, byte for byte. The sink keeps, per run, the stream
// sequence of the last line it placed, and reads it back from the server (the subject's last message)
// on first use and after any error. Lines the stream already holds are not published again: the sink
// reads each back and compares bytes; identical is success, other bytes a conflict (an error wrapping
// ErrConflict, journal.ErrPayloadConflict and outbox.ErrSinkRefused, which stops that run's
// projection). This holds inside the stream's duplicate window and after it. A publication the server
// answers with "duplicate Msg-Id" or "wrong last sequence" (another sink placed lines meanwhile) makes
// the sink read the run back and decide once more; a duplicate answer for a line the stream does not
// hold under that run and seq is a refusal, never a retry loop. It holds only while the stream keeps
// what it was given, so NewSink refuses a stream whose limits delete lines (see CreateStream). Trim
// removes lines too, but records first, for each run, the highest seq it removes: the sink takes a
// line at or below that record for one the stream held, and places the run's next line after it
// when the stream holds none of the run's lines.
//
// # Readers and trimming
//
// ApplyStream and FollowStream register the reader (inbox.WithReaderName, or the inbox's derived
// name) in the stream's readers' bucket (ReadersBucket): before a session reads, the position it
// reads after, and after each commit, the stream sequence committed; a call that cannot write the key
// reads nothing (ApplyStream returns the error, FollowStream waits and tries again). A reader is
// protected from the moment its key is written, its first read included: a reader without a
// position writes its key first and only then reads where the stream begins and what a trim
// running meanwhile announced it removes, and starts above both, while Trim announces what it
// removes before its last look at the keys, so that one of the two always sees the other. A key
// may lag its inbox, never run ahead of it. Once an Inbox wrote the key, its calls write only over its last write: a key
// another consumer wrote meanwhile, with another position, is two inboxes reading under one name,
// which stops the call with ErrReaderNameShared (Status gives each registered reader's lag and what
// the cap took). Trim removes only what is below the lowest registered position and older than its
// keep duration; its hard cap (WithMaxBytes) removes past the readers and writes a mark first, and
// a reader whose position is below the mark stops with ErrRetentionGap, as for any other removal.
//
// # A book behind the stream
//
// The sink is an outbox.RunLister (Sink.SinkRuns): a relay compares the runs the stream holds under the
// sink's prefix with its book at its first call, and stops with outbox.ErrBookBehind, publishing
// nothing, when the stream holds a run the book never recorded or further than the book knows (a book
// restored from an older backup). The list is one stream info request, a subject a run, reading no
// message: a run's message count is its last seq, since the sink places each seq once, from 1, in a
// stream that deletes nothing. A message deleted by hand lowers its run's count, so the check can miss
// that run but never names one wrongly. A stream that several books' engines publish to under one
// prefix holds runs each book does not know: give those relays outbox.WithBookCheck(false).
//
// # Refusals before anything is published
//
// Append checks a whole batch before it publishes any of it, and refuses it (errors wrapping
// outbox.ErrSinkRefused) when a line's own engine_run_id is not the run it is appended for or its own
// seq is not its EventLine.Seq (ErrLineKey), when a line holds a newline, when the seqs of the batch
// are not consecutive (ErrGap), and when the run's subject or a line with its headers would exceed the
// server's limits (ErrTooLarge): the subject with the stream's name must fit in MaxSubjectLen bytes,
// well inside the server's default max control line of 4,096 bytes, beyond which the server closes
// the connection for every other run; a line with its headers must fit the server's max payload and
// the stream's max message size. A limit lowered after NewSink is learned from the server's answer
// ("message size exceeds maximum allowed"), which is ErrTooLarge too: the relay stops, naming the run,
// the seq, the line's size and the limit, instead of sending the line again for ever.
//
// # Trace context
//
// A line that carries a W3C trace context (its "trace" member, written by journal.WithTraceContext)
// is published with it as the headers traceparent and tracestate (TraceparentHeader,
// TracestateHeader), for NATS tooling and OpenTelemetry's propagators; the headers count in the size
// check above. The member is checked first (journal.LineTraceContext): a malformed one sets no header
// and the line is published as it is. Without a trace member nothing is added. The stream's reader
// takes the trace context from the line itself, so what ApplyStream gives a handler is the same as
// the file's reader gives.
//
// # Ids
//
// Distinct run ids map to distinct subjects and distinct Msg-Ids: the token encoding is reversible and
// its alphabet has no whitespace, dot or wildcard, so neither the subject syntax nor nats.go's
// trimming of header values can merge two runs.
//
// # Durability
//
// JetStream acknowledges a message once its leader has it (with replicas, once a majority has it),
// before an fsync unless the server runs with sync always (the default syncs every two minutes). So:
//
//   - one replica, default sync: an acknowledged line survives a process crash of the server, not a
//     power failure of its machine, after the outbox has recorded it as projected;
//   - one replica, sync always (server setting jetstream.sync_interval: always): survives power failure
//     of the one machine, not its loss;
//   - three replicas: an acknowledged line is on a majority of servers, and survives the loss, or the
//     power failure, of any one of them.
//
// CreateStream makes a file-storage stream; WithMinReplicas makes NewSink refuse a stream with fewer
// replicas than asked for.
//
// # Reading a stream into an inbox
//
// ApplyStream and FollowStream are the stream's source for an inbox (package inbox), beside the
// inbox's file source, ApplyFile and FollowFile:
//
//	rep, err := jetstream.ApplyStream(ctx, js, "EVENTS", in, h) // to the stream's last message now
//	err = jetstream.FollowStream(ctx, js, "EVENTS", in, h)      // then on until ctx ends: ctx.Err()
//
// The broker's own consumers do not give exactly once: an ordered consumer keeps its cursor in memory
// only, a durable consumer's acknowledgements are stored apart from the consumer's database, a start
// sequence below the stream's first silently starts at the first, and stream sequences have
// legitimate holes. So the source keeps these rules:
//
//   - The position is the inbox's. Each batch of lines (bounded by the inbox's WithBatchLines and
//     WithBatchBytes) is applied in one transaction with the last stream sequence read
//     (inbox.ApplyFrom), under the source name StreamSourceName(stream, prefix): one position per
//     stream and subject filter (<prefix>.>, WithSubjectPrefix). A restart reads on from it + 1 with
//     a new ordered consumer: no acknowledgements, memory storage, deleted when the call returns;
//     nothing the server keeps is trusted. What the consumer holds beside the batch being applied
//     is bounded by the same bounds: one batch waiting, and one pull request's worth on the
//     connection (its bytes at least the connection's max payload, so that any message fits).
//   - Continuity is each line's own. A hole in stream sequences (a message deleted from the middle)
//     is no error; a run whose seq is missing is quarantined for a gap by the inbox, the others go on.
//     Lines a relay re-delivered are duplicates by their bytes; other bytes under an applied (run,
//     seq) quarantine the run as a conflict.
//   - A retention gap is reported, never skipped. A stream whose first sequence is above the stored
//     position + 1 (MaxAge, MaxMsgs or MaxBytes under discard-old, a purge, while the consumer was
//     away or behind) stops the call with a *RetentionGapError wrapping ErrRetentionGap, naming the
//     position and the first sequence, with nothing applied past the position. It is checked when a
//     call starts, again at every hole a batch holds (a purge while the consumer reads), and when
//     the consumer has nothing pending at its start (a purge just before it started: a consumer
//     asked to start below the stream's first sequence starts at the first, silently). Trim's cap
//     mark (CappedBelow) above the position + 1 is a retention gap the same way. A stream
//     deleted and created again under the same name is one too: the position holds the stream's
//     creation time, which the server keeps across restarts and failovers. WithAcceptRetentionGap is
//     the operator's explicit acceptance: the call reads on from the first message held, logs it, and
//     each run that lost lines is then quarantined for its own gap, as usual.
//   - Runs lost whole are named where they can be. A run whose every line was removed leaves no later
//     line to show its gap. The error names the runs the inbox has applied lines of whose subject the
//     stream no longer holds any message of (from the stream's subject list for the filter): such a
//     run's lines past its high-water mark, if it had any, are gone without a trace. A run the inbox
//     never saw a line of cannot be named by anyone; a run that ended long ago and whose lines were
//     removed since is named too, which is what checking by hand is for.
//   - A malformed message stops the source. A message that is not a journal line, holds a newline,
//     is over the inbox's line limit, or whose engine_run_id is not its subject's run (which the sink
//     never publishes) stops the call with an error wrapping journal.ErrMalformed that names its
//     subject and stream sequence; the lines before it are applied, so the position stops at it.
//   - After a Release or an AcceptGap, which rewind every source, the stream is read again from the
//     first message it holds, but the position the source was rewound from (inbox.SourceState)
//     stays the floor of the retention-gap check: a message after it that the stream no longer
//     holds is a retention gap, as it was before the rewind; messages at or below it may go (they
//     were applied). The floor is stored with each position below it (StreamPosition.Floor), so a
//     call stopped while it reads again keeps it. A running FollowStream looks at the stored
//     position at the inbox's poll interval while no message comes, so it notices a Release
//     without new messages.
//   - The broker's failures cost latency, not lines. FollowStream meets a server restart, a leader's
//     failover or a dropped connection by waiting (backing off up to the poll interval) and reading
//     on from the position it last committed, with a new ordered consumer; the batch that was not
//     committed is read again. The ordered consumer's own resets (a missed heartbeat, a message the
//     connection dropped) resume after the last message it delivered, and what it delivered enters
//     the batch in stream order. ApplyStream returns such an error, and calling it again goes on from
//     the stored position. A closed connection ends both. A stream that does not exist ends
//     ApplyStream; FollowStream waits for it, looking at the poll interval until its context ends.
//
// What it cannot see: a stream that loses acknowledged messages (one replica without sync always, a
// power failure) gives their sequences to the next messages. A call that finds the stream's last
// sequence below its position reads the stream again from its start (what was applied comes back as
// duplicates), but a consumer that was away while the stream lost its tail and then grew past the
// position again skips the new messages under the old sequences; their runs' later lines show the
// gap, and a run whose every line was among them is lost silently. Use three replicas, or sync
// always, for a stream an inbox reads. Through a subject filter, a removal of other subjects'
// messages after the position is reported as a retention gap too (the server does not say which
// subjects a removal took): ApplyStream keeps its position up with the stream's last sequence when
// it has read everything of its filter, so this happens only to a consumer that was behind.
//
// [docs/RELIABILITY.md]: https://github.com/textmachine/outbox/blob/main/docs/RELIABILITY.md
package jetstream
