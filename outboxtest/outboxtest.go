// SPDX-License-Identifier: Apache-2.0

package outboxtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// NewStore opens a store in a new book in t.TempDir(), closed when the test ends. Its line check is
// journal.CheckLine, so that a builder whose line is not a journal line of its own run and seq fails
// its enqueue (outbox.ErrInvalidLine) rather than its projection later; an outbox.WithLineCheck in
// opts replaces it. A failure to open fails the test.
func NewStore(t testing.TB, opts ...outbox.Option) *outbox.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path, append([]outbox.Option{outbox.WithLineCheck(journal.CheckLine)}, opts...)...)
	if err != nil {
		t.Fatalf("outboxtest: open a store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Flush projects every line of runID that s holds into sink with a relay, as an engine's relay does,
// and fails the test if the sink refuses a batch or the store fails.
func Flush(t testing.TB, s *outbox.Store, sink outbox.Sink, runID string) {
	t.Helper()
	r, err := outbox.NewRelay(s, sink, runID, outbox.WithFlushAttempts(1))
	if err != nil {
		t.Fatalf("outboxtest: relay of run %q: %v", runID, err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("outboxtest: flush run %q: %v", runID, err)
	}
}

// NewInbox opens an inbox in a new database in t.TempDir(), closed when the test ends. A failure to
// open fails the test.
func NewInbox(t testing.TB, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	in, err := inbox.Open(context.Background(), filepath.Join(t.TempDir(), "platform.db"), opts...)
	if err != nil {
		t.Fatalf("outboxtest: open an inbox: %v", err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// Feed applies lines to in with h, in one call of Apply, as a source hands the inbox a batch, and
// returns its Report. Any error (a line that is not a journal line, a handler's error under the
// default fail-stop) fails the test: a test that expects one calls in.Apply itself.
func Feed(t testing.TB, in *inbox.Inbox, h inbox.Handler, lines ...[]byte) inbox.Report {
	t.Helper()
	rep, err := in.Apply(context.Background(), lines, h)
	if err != nil {
		t.Fatalf("outboxtest: apply %d lines: %v", len(lines), err)
	}
	return rep
}
