// SPDX-License-Identifier: Apache-2.0

// Package outboxtest helps a team test its own code against the outbox: the builders its engine
// enqueues with and the handlers its platform applies lines with, without a journal file, a
// stream or a hand-made database.
//
//   - NewStore opens a store (a book) in the test's temporary directory, closed when the test ends.
//   - Sink is an in-memory sink that checks each batch as the journal file does and keeps each
//     run's lines; Flush projects a run's lines into it with a relay.
//   - NewInbox opens an inbox in the test's temporary directory; Feed applies lines to it with a
//     handler, as a source would.
//
// A test goes from the engine's enqueue to the platform's tables in a few lines:
//
//	s := outboxtest.NewStore(t)
//	// the engine's code under test enqueues to run "r1" of s
//	sink := outboxtest.NewSink()
//	outboxtest.Flush(t, s, sink, "r1")
//	in := outboxtest.NewInbox(t)
//	rep := outboxtest.Feed(t, in, router.Route, sink.Lines()...)
//
// The helpers fail the test (t.Fatal) on an error they do not expect; a test of an error calls the
// store or the inbox itself. They are for tests only: the stores and inboxes they open are in
// temporary directories, gone when the test ends.
package outboxtest
